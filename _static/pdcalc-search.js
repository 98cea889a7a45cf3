/* pdcalc: the search page's results (Sphinx 7's searchtools.js), loaded on every page by Jupyter Book.
 *
 * 1. One result per page and title. A glossary term is an index entry of the glossary page, so a query such
 *    as "KV cache" found the glossary twice, as "Glossary" (the term's entry) and "Glossary" (its text). The
 *    result with the higher score is kept: for a term, the link to the term itself.
 * 2. A snippet that reads as text. Sphinx takes it from the page's [role="main"], which in this theme holds
 *    the print-only table of contents and the page navigation too, keeps every newline of the HTML and runs
 *    table cells together. The snippet is now taken from the article alone, code inputs left out, cells and
 *    paragraphs apart, whitespace collapsed; a glossary term's snippet is the term and its definition.
 *
 * Sphinx reads a result's page with fetch(), which a browser refuses for a page opened from file://; there
 * the results show no snippet (serve the site over http, e.g. `python -m http.server -d _build/html`).
 */
(() => {
  "use strict";

  const squash = (s) => s.replace(/\s+/g, " ").trim();

  const patch = () => {
    if (typeof Search === "undefined" || Search.pdcalcPatched) return;
    Search.pdcalcPatched = true;

    const perform = Search._performSearch;
    Search._performSearch = (...args) => {
      // Results are ordered by rising score and shown from the last: keep the last of each page and title.
      const results = perform(...args);
      const seen = new Set();
      const kept = [];
      for (let i = results.length - 1; i >= 0; i--) {
        const key = `${results[i][0]}\u0000${results[i][1]}`;
        if (!seen.has(key)) {
          seen.add(key);
          kept.push(results[i]);
        }
      }
      return kept.reverse();
    };

    Search.htmlToText = (htmlString, anchor) => {
      const doc = new DOMParser().parseFromString(htmlString, "text/html");
      const drop = [".headerlink", "script", "style", "nav", ".onlyprint", "div.cell_input", ".pdcalc-csv",
                    "mjx-assistive-mml"];
      doc.querySelectorAll(drop.join(", ")).forEach((el) => el.remove());
      // a table's cells, a list's items, paragraphs and headings as separate words ("104.3 GiB/s 112")
      doc.querySelectorAll("td, th, li, p, dt, dd, caption, h1, h2, h3, h4").forEach((el) => el.append(" "));
      const main = doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
      if (!main) return "";
      const target = anchor ? doc.getElementById(decodeURIComponent(anchor.replace(/^#/, ""))) : null;
      if (target && main.contains(target)) {
        if (target.tagName === "DT") {  // a glossary term: the term and its definition
          let dd = target.nextElementSibling;
          while (dd && dd.tagName === "DT") dd = dd.nextElementSibling;
          return `${squash(target.textContent)}: ${squash(dd ? dd.textContent : "")}`;
        }
        return squash(target.textContent);
      }
      return squash(main.textContent);
    };
  };

  // searchtools.js is loaded after this file and starts the search when the document is ready: patch
  // it before then (listeners run in the order they were added), or at once if it is already there.
  if (typeof Search !== "undefined") patch();
  else document.addEventListener("DOMContentLoaded", patch);
})();
