"""Search that finds the chapters' Chinese as well as their English (a local Sphinx extension).

Sphinx's own Chinese search (``html_search_language: zh``) splits Chinese text with ``jieba`` when it is
installed and indexes nothing Chinese when it is not, silently. With jieba it still misses what a reader of
this book types: it cuts 昇腾 into two single characters, which the index drops, and a reader who pastes an
article's table name (最终每卡权重全景图) gets one query word that matches no indexed word.

This extension replaces the ``zh`` search language with one that needs no dictionary:

- **index**: every run of Han characters is indexed as its overlapping character pairs (最终每卡 ->
  最终, 终每, 每卡) and, when it is one character long, as that character; everything else is split into
  words as the English search does and stemmed by the same English stemmer;
- **query** (the ``splitQuery`` JavaScript function, shipped in ``language_data.js``): the same split, so a
  Chinese query of any length becomes pairs that must all occur on a page (Sphinx's search requires every
  query word), which finds the pages holding the phrase.

English search keeps working: non-Han words are split, stemmed and filtered as before.
"""

from __future__ import annotations

import re

from sphinx.application import Sphinx
from sphinx.search.zh import SearchChinese

#: Han characters: CJK Unified Ideographs, Extension A, Compatibility Ideographs, and the supplementary
#: ideographic plane (Extensions B onwards). The JavaScript splitter uses the same ranges.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002ffff"
_HAN_RUN = re.compile(f"([{HAN}]+)")
_IS_HAN = re.compile(f"[{HAN}]+")
_WORD = re.compile(r"\w+")

#: The query splitter; mirrors :meth:`SearchZhPairs.split` (and Sphinx's default splitter elsewhere).
JS_SPLITTER = r"""
/* search_zh: Han runs as overlapping character pairs, other words as Sphinx splits them (book/_ext/search_zh.py) */
var splitQuery = (query) => {
  const han = /^(?:[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[\u{20000}-\u{2ffff}])+$/u;
  const terms = [];
  for (const word of query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/gu)) {
    if (!word) continue;
    for (const part of word.split(/((?:[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[\u{20000}-\u{2ffff}])+)/u)) {
      if (!part) continue;
      if (!han.test(part)) { terms.push(part); continue; }
      const chars = Array.from(part);
      if (chars.length === 1) { terms.push(part); continue; }
      for (let i = 0; i + 1 < chars.length; i++) terms.push(chars[i] + chars[i + 1]);
    }
  }
  return terms;
};
"""


def han_terms(run: str) -> list[str]:
    """The index terms of one run of Han characters: its overlapping pairs, or the character itself."""
    if len(run) == 1:
        return [run]
    return [run[i:i + 2] for i in range(len(run) - 1)]


def split_words(text: str) -> list[str]:
    """Index terms of ``text``: Han runs as :func:`han_terms`, other words (``\\w+``) whole."""
    out: list[str] = []
    for word in _WORD.findall(text):
        for part in _HAN_RUN.split(word):
            if not part:
                continue
            out.extend(han_terms(part) if _IS_HAN.fullmatch(part) else [part])
    return out


class SearchZhPairs(SearchChinese):
    """``zh`` search: Han character pairs plus English words (module docstring)."""

    lang = "zh"
    language_name = "Chinese"
    js_splitter_code = JS_SPLITTER

    def init(self, options: dict) -> None:
        import snowballstemmer

        self.stemmer = snowballstemmer.stemmer("english")
        self.latin_terms = set()  # per instance (SearchChinese keeps one list on the class); read by stem()

    def split(self, input: str) -> list[str]:
        words = split_words(input)
        self.latin_terms.update(w for w in words if not _IS_HAN.fullmatch(w))
        return words

    def word_filter(self, stemmed_word: str) -> bool:
        if _IS_HAN.fullmatch(stemmed_word):
            return True
        return len(stemmed_word) > 1 and stemmed_word not in self.stopwords

    def stem(self, word: str) -> str:
        if _IS_HAN.fullmatch(word):
            return word
        return super().stem(word)


def setup(app: Sphinx) -> dict:
    app.add_search_language(SearchZhPairs)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
