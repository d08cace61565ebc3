// The home page's look-up box: an arXiv id or a Pith number to the record's page.
//
// An arXiv id is looked up through the store's pointer, arxiv/<id>.json (its
// records by version, and the latest); a Pith number (pith:YYYY:ID, pith:ID or a
// bare ID) names its page, pith/<ID>/, directly. Every URL is relative to the
// home page, so a store served under any prefix works. The form submits ?q=...,
// so a look-up is also a link: index.html?q=2101.00001v2.
"use strict";

(function () {
  const BODY = /^[A-Z2-7]{26}$/;
  const PITH = /^pith:(?:\d{4}:)?([A-Za-z2-7]{26})$/i;
  const SHORT = /^pith:[A-Za-z2-7]{8,16}$/i;
  const ARXIV = /^(\d{4}\.\d{4,5}|[a-z]+(?:-[a-z]+)*(?:\.[A-Za-z]{2})?\/\d{7})(?:v(\d+))?$/;

  function say(status, text, href) {
    status.textContent = text;
    if (href) {
      const a = document.createElement("a");
      a.href = href;
      a.id = "pith-lookup-result";
      a.textContent = href;
      status.append(" ", a);
    }
  }

  function go(status, path) {
    const url = new URL(path, document.baseURI).href;
    say(status, "Opening", url);
    window.location.assign(url);
  }

  function pageOf(body) {
    return "pith/" + body + "/";
  }

  function clean(q) {
    return q
      .trim()
      .replace(/^https?:\/\/(?:www\.)?arxiv\.org\/(?:abs|pdf)\//i, "")
      .replace(/\.pdf$/i, "")
      .replace(/^arxiv:/i, "");
  }

  async function lookup(q, status) {
    const s = clean(q);
    const pith = PITH.exec(s) || (BODY.test(s.toUpperCase()) ? [s, s] : null);
    if (pith) {
      go(status, pageOf(pith[1].toUpperCase()));
      return;
    }
    if (SHORT.test(s)) {
      say(status, "A short Pith number cannot be looked up here: give the full number or the arXiv id.");
      return;
    }
    const m = ARXIV.exec(s);
    if (!m) {
      say(status, "Not an arXiv id (2101.00001, 2101.00001v2, hep-th/9901001) or a Pith number (pith:2021:…).");
      return;
    }
    const id = m[1];
    const version = m[2] ? Number(m[2]) : null;
    const pointer = "arxiv/" + id.split("/").map(encodeURIComponent).join("/") + ".json";
    say(status, "Looking up " + id + "…");
    let doc;
    try {
      const resp = await fetch(new URL(pointer, document.baseURI), { cache: "no-cache" });
      if (resp.status === 404 || resp.status === 403) {
        say(status, "This store holds no record of arXiv " + id + ".");
        return;
      }
      if (!resp.ok) {
        say(status, "The look-up failed: " + pointer + " answered HTTP " + resp.status + ".");
        return;
      }
      doc = await resp.json();
    } catch (err) {
      say(status, "The look-up failed: " + pointer + " could not be read (" + err + ").");
      return;
    }
    const records = Array.isArray(doc && doc.records) ? doc.records : [];
    let number = null;
    if (version === null) {
      number = typeof doc.latest === "string" ? doc.latest : null;
    } else {
      const hit = records.find((r) => r && r.version === version);
      number = hit && typeof hit.pith_number === "string" ? hit.pith_number : null;
      if (!number) {
        const have = records.map((r) => "v" + r.version).join(", ");
        say(status, "This store has no record of " + id + "v" + version + " (it has " + (have || "none") + ").");
        return;
      }
    }
    const body = number ? number.split(":").pop() : "";
    if (!BODY.test(body)) {
      say(status, "The pointer " + pointer + " names no Pith number.");
      return;
    }
    go(status, pageOf(body));
  }

  function start() {
    const form = document.getElementById("pith-lookup");
    const input = document.getElementById("pith-q");
    const status = document.getElementById("pith-lookup-status");
    if (!form || !input || !status) return;
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      lookup(input.value, status);
    });
    const q = new URLSearchParams(window.location.search).get("q");
    if (q) {
      input.value = q;
      lookup(q, status);
    }
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
