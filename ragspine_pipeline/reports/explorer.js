// The case explorer's list: filters, search, paging and row details over the embedded document
// (reports/explorer.py states its format). Only the rows of the current page exist in the DOM, so a
// run of any size opens as fast as a run of fifty cases. Data is only ever inserted as text.
(function () {
  "use strict";

  var PAGE_SIZE = 50;
  var CHANGED = { "pass→fail": true, "fail→pass": true };
  var NOT_AVAILABLE = "n/a"; // the stage filter's value for cases without a first failed stage

  var doc = JSON.parse(document.getElementById("cases-data").textContent);
  var cases = doc.cases;
  var byQid = new Map(cases.map(function (c) { return [c.qid, c]; }));
  var open = new Set();
  var page = 0;
  var matches = cases;
  var wanted = {}; // each filter's value, read once per change

  function $(id) { return document.getElementById(id); }

  // What each filter reads of a case: the option values the case counts for.
  var facets = {
    flip: { select: $("filter-flip"), keys: function (c) { return CHANGED[c.flip] ? [c.flip, "changed"] : [c.flip]; } },
    verdict: { select: $("filter-verdict"), keys: function (c) { return [c.verdict]; } },
    slice: { select: $("filter-slice"), keys: slicesOf },
    stage: { select: $("filter-stage"), keys: function (c) { return [c.first_failed_stage || NOT_AVAILABLE]; } },
  };
  var search = $("search");

  function slicesOf(c) {
    if (!c._slices) {
      c._slices = Object.keys(c.tags).map(function (key) { return key + "=" + c.tags[key]; });
    }
    return c._slices;
  }

  function haystack(c) {
    if (c._text === undefined) {
      c._text = [c.qid, c.question || "", c.answer || ""].join("\n").toLowerCase();
    }
    return c._text;
  }

  function passes(c, name) {
    return wanted[name] === "all" || facets[name].keys(c).indexOf(wanted[name]) >= 0;
  }

  function matchesSearch(c, needle) {
    return !needle || haystack(c).indexOf(needle) >= 0;
  }

  // -- options -------------------------------------------------------------------------------------

  function addOption(select, value) {
    var option = document.createElement("option");
    option.value = value;
    option.textContent = value;
    select.appendChild(option);
  }

  function fillOptions() {
    var slices = new Set();
    var stages = new Set();
    cases.forEach(function (c) {
      slicesOf(c).forEach(function (s) { slices.add(s); });
      stages.add(c.first_failed_stage || NOT_AVAILABLE);
    });
    Array.from(slices).sort().forEach(function (s) { addOption(facets.slice.select, s); });
    doc.stages.concat([NOT_AVAILABLE]).forEach(function (s) {
      if (stages.has(s)) { addOption(facets.stage.select, s); }
    });
    var flip = facets.flip.select;
    var hasBaseline = doc.baseline.source !== null;
    if (hasBaseline) { flip.querySelector('option[value="no baseline"]').remove(); }
    flip.value = hasBaseline && doc.counts.changed > 0 ? "changed" : "all";
    Array.from(document.querySelectorAll(".filters option")).forEach(function (option) {
      option.dataset.label = option.textContent;
    });
  }

  // Every option shows how many cases it would match, given the other filters and the search.
  function updateCounts(needle) {
    Object.keys(facets).forEach(function (name) {
      var counts = { all: 0 };
      cases.forEach(function (c) {
        if (!matchesSearch(c, needle)) { return; }
        for (var other in facets) {
          if (other !== name && !passes(c, other)) { return; }
        }
        counts.all += 1;
        facets[name].keys(c).forEach(function (key) { counts[key] = (counts[key] || 0) + 1; });
      });
      Array.from(facets[name].select.options).forEach(function (option) {
        option.textContent = option.dataset.label + " (" + (counts[option.value] || 0) + ")";
      });
    });
  }

  // -- the list ------------------------------------------------------------------------------------

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    return node;
  }

  function pill(text, kind) {
    return element("span", "pill " + kind, text);
  }

  function idList(ids) {
    if (!ids || ids.length === 0) { return element("p", "note", ids ? "none" : "not in the trace"); }
    var list = element("ul", "ids");
    ids.forEach(function (id) {
      var item = element("li");
      item.appendChild(element("code", "", id));
      list.appendChild(item);
    });
    return list;
  }

  function metricCell(value) {
    if (value === null || value === undefined) { return "n/a"; }
    if (value === 1) { return "pass"; }
    if (value === 0) { return "fail"; }
    return String(value);
  }

  function details(c) {
    var box = element("div", "details");
    function part(title, node) {
      box.appendChild(element("h3", "", title));
      box.appendChild(node);
    }
    part("Question", element("p", "text", c.question));
    var answer = c.missing ? "No trace: scored as an empty answer." : (c.answer || "(empty answer)");
    part("Answer", element("p", "text" + (c.missing || !c.answer ? " note" : ""), answer));
    var facts = "label " + c.label + " · first failed stage " + (c.first_failed_stage || NOT_AVAILABLE) +
      " · baseline " + (c.baseline_verdict || "—");
    part("Verdict", element("p", "", c.verdict + " (" + facts + ")"));
    part("Expected citations (one of)", idList(c.expected_ids || []));
    part("Expected phrases (one of)", idList(c.expected_phrases || []));
    part("Cited ids", idList(c.cited_ids));
    part("Retrieved ids", idList(c.retrieved_ids));
    if (c.contexts) {
      var contexts = element("ol", "contexts");
      c.contexts.forEach(function (ctx) {
        var item = element("li");
        if (ctx.id !== null) { item.appendChild(element("code", "", ctx.id)); }
        item.appendChild(element("div", "text", ctx.text === null ? "" : ctx.text));
        contexts.appendChild(item);
      });
      part("Contexts", c.contexts.length ? contexts : element("p", "note", "none"));
    }
    var table = element("table");
    var head = element("tr");
    head.appendChild(element("th", "", "metric"));
    head.appendChild(element("th", "", "verdict"));
    table.appendChild(element("thead")).appendChild(head);
    var body = table.appendChild(element("tbody"));
    doc.metrics.forEach(function (name) {
      var value = c.metrics[name];
      var row = element("tr", value === null || value === undefined ? "na" : "");
      row.appendChild(element("td", "mono", name));
      row.appendChild(element("td", "num", metricCell(value)));
      body.appendChild(row);
    });
    var scroll = element("div", "scroll");
    scroll.appendChild(table);
    part("Metrics", scroll);
    part("Slices", idList(slicesOf(c)));
    return box;
  }

  function row(c) {
    var item = element("li", "case-row" + (open.has(c.qid) ? " open" : ""));
    item.dataset.qid = c.qid;
    item.dataset.verdict = c.verdict;
    item.dataset.flip = c.flip;
    var head = element("button", "case-head");
    head.type = "button";
    head.setAttribute("aria-expanded", open.has(c.qid) ? "true" : "false");
    head.appendChild(element("code", "qid", c.qid));
    head.appendChild(pill(c.verdict, c.verdict));
    if (c.flip !== "same" && c.flip !== "no baseline") {
      head.appendChild(pill(c.flip, c.flip.replace("→", "-").replace(" ", "-")));
    }
    if (c.first_failed_stage && c.first_failed_stage !== "pass") {
      head.appendChild(pill(c.first_failed_stage, "stage"));
    }
    head.appendChild(element("span", "q", c.question));
    item.appendChild(head);
    if (open.has(c.qid)) { item.appendChild(details(c)); }
    return item;
  }

  function render() {
    var pages = Math.max(1, Math.ceil(matches.length / PAGE_SIZE));
    page = Math.min(Math.max(page, 0), pages - 1);
    var fragment = document.createDocumentFragment();
    matches.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE).forEach(function (c) {
      fragment.appendChild(row(c));
    });
    $("case-list").replaceChildren(fragment);
    $("match-count").textContent = String(matches.length);
    $("page-info").textContent = pages > 1 ? " · page " + (page + 1) + " of " + pages : "";
    document.querySelectorAll("[data-step]").forEach(function (button) {
      var step = Number(button.dataset.step);
      button.disabled = page + step < 0 || page + step >= pages;
    });
  }

  function apply() {
    var needle = search.value.trim().toLowerCase();
    Object.keys(facets).forEach(function (name) { wanted[name] = facets[name].select.value; });
    matches = cases.filter(function (c) {
      return matchesSearch(c, needle) && Object.keys(facets).every(function (name) { return passes(c, name); });
    });
    page = 0;
    updateCounts(needle);
    render();
  }

  // -- events --------------------------------------------------------------------------------------

  Object.keys(facets).forEach(function (name) { facets[name].select.addEventListener("change", apply); });
  search.addEventListener("input", apply);
  document.querySelectorAll("[data-step]").forEach(function (button) {
    button.addEventListener("click", function () {
      page += Number(button.dataset.step);
      render();
    });
  });
  $("case-list").addEventListener("click", function (event) {
    var head = event.target.closest(".case-head");
    if (!head) { return; }
    var item = head.parentNode;
    var qid = item.dataset.qid;
    if (open.has(qid)) { open.delete(qid); } else { open.add(qid); }
    var fresh = row(byQid.get(qid));
    item.replaceWith(fresh);
    fresh.firstChild.focus();
  });

  fillOptions();
  apply();
  // When the first screen was ready, in ms since navigation started (what a browser test reads).
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
})();
