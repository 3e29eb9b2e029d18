// zhin report html: draws a turn's wire messages and its diff when the turn is opened (the sections, chart
// bars and segment bars are in the HTML already). Data: the JSON in #zhin-data, parsed on first use; each
// distinct wire chunk is stored once per session, each turn lists its chunks as "keep the previous turn's
// first k, then these".
(function () {
  "use strict";
  var data = null;
  var decoded = {};

  function load() {
    if (data === null) data = JSON.parse(document.getElementById("zhin-data").textContent);
    return data;
  }

  // The chunk ids and segment groups of every turn of session s, decoded once.
  function turnsOf(s) {
    if (decoded[s]) return decoded[s];
    var session = load().sessions[s];
    var out = {};
    var chunks = [], groups = [];
    session.turns.forEach(function (t) {
      chunks = chunks.slice(0, t.keep).concat(t.chunks);
      groups = groups.slice(0, t.keep).concat(t.groups);
      out[t.turn] = {turn: t, chunks: chunks, groups: groups};
    });
    var order = session.turns.map(function (t) { return t.turn; });
    decoded[s] = {session: session, byTurn: out, order: order};
    return decoded[s];
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A header is "[id:" or "[scene_id:" up to the first "]" on its line, that "]" right after a ";". Found by a
  // scan, not a regex: a backtracking regex retries from every "[id:" and rescans the rest of the line each time
  // (quadratic: 400 KB of "[id:" took 13.5 s). Here a header start with no valid end skips every other start up
  // to that end (they share it), so each character is looked at a bounded number of times.
  var HEADER_STARTS = ["[id:", "[scene_id:"];

  // the first header start at or after "from"; each kind's next position is kept until passed, so the text is
  // searched once per kind (not once per start: a rare kind would be searched for to the end every time)
  function starts(text) {
    var next = HEADER_STARTS.map(function () { return -2; });
    return function (from) {
      var best = -1;
      HEADER_STARTS.forEach(function (start, k) {
        if (next[k] !== -1 && next[k] < from) next[k] = text.indexOf(start, from);
        if (next[k] >= 0 && (best < 0 || next[k] < best)) best = next[k];
      });
      return best;
    };
  }

  // the end (exclusive) of the line-bounded run from "from": the first "]" or newline at or after it, or -1
  function runEnd(text, from) {
    for (var i = from; i < text.length; i++) {
      var c = text.charCodeAt(i);
      if (c === 93 || c === 10) return i;  // "]", "\n"
    }
    return -1;
  }

  function headerRanges(text, ranges) {
    var nextStart = starts(text);
    var from = 0;
    var start;
    while ((start = nextStart(from)) >= 0) {
      var end = runEnd(text, start);
      if (end < 0) return;  // no "]" nor newline left: no header can end
      if (text.charCodeAt(end) === 93 && text.charCodeAt(end - 1) === 59) {  // ";]"
        ranges.push([start, end + 1, "hdr"]);
      }
      from = end + 1;  // every start before "end" ends there too: none of them can be a header either
    }
  }

  // the host's lines: at a line's start, or right after the event's own header (Anthropic, Gemini: one block per
  // event); a member's text that quotes "[state change]" mid-line is not one. Linear: each try is a fixed-length
  // look-behind and literal, and a match takes the rest of its line, so no character is rescanned.
  var STATE = /(?<=^|;\] )\[state change\][^\n]*/gm;

  // text with headers and [state change] lines wrapped in spans
  function marked(text) {
    var frag = document.createDocumentFragment();
    var ranges = [];
    var m;
    headerRanges(text, ranges);
    STATE.lastIndex = 0;
    while ((m = STATE.exec(text)) !== null) ranges.push([m.index, m.index + m[0].length, "state"]);
    ranges.sort(function (a, b) { return a[0] - b[0]; });
    var at = 0;
    ranges.forEach(function (r) {
      if (r[0] < at) return;  // overlapping: the first wins
      if (r[0] > at) frag.appendChild(document.createTextNode(text.slice(at, r[0])));
      frag.appendChild(el("span", r[2], text.slice(r[0], r[1])));
      at = r[1];
    });
    if (at < text.length) frag.appendChild(document.createTextNode(text.slice(at)));
    return frag;
  }

  // the text a person reads of one wire chunk (a message, the system region, the tools)
  function readable(label, value) {
    if (label === "message" && value && typeof value === "object") {
      var parts = [];
      var content = value.content !== undefined ? value.content : value.parts;
      if (typeof content === "string") parts.push(content);
      else if (Array.isArray(content)) content.forEach(function (b) {
        parts.push(b && typeof b.text === "string" ? b.text : JSON.stringify(b, null, 1));
      });
      else if (content !== null && content !== undefined) parts.push(JSON.stringify(content, null, 1));
      if (value.tool_calls) parts.push(JSON.stringify(value.tool_calls, null, 1));
      if (value.tool_call_id) parts.unshift("(result of " + value.tool_call_id + ")");
      return parts.join("\n");
    }
    if (typeof value === "string") return value;
    if (Array.isArray(value)) return value.map(function (b) {
      return b && typeof b.text === "string" ? b.text : JSON.stringify(b, null, 1);
    }).join("\n");
    return JSON.stringify(value, null, 1);
  }

  function breakpointLine(b) {
    var where = b.after !== undefined && b.after !== null ? "after " + b.after : "before " + b.before;
    return el("div", "bp" + (b.explicit ? " explicit" : ""), "cache breakpoint · " + where + (b.explicit ? " · cache_control marker" : " · automatic prefix caching"));
  }

  function drawMessages(box, s, turnNumber) {
    var view = turnsOf(s);
    var entry = view.byTurn[turnNumber];
    var t = entry.turn;
    var chunks = view.session.chunks, groups = view.session.groups;
    var messageIndex = -1;
    var byIndex = {};
    var tailText = t.tail_text === null ? null : chunks[t.tail_text][1];
    JSON.parse(chunks[t.breakpoints][1]).forEach(function (b) { (byIndex[b.message_index] = byIndex[b.message_index] || []).push(b); });
    entry.chunks.forEach(function (id, position) {
      var chunk = chunks[id];
      var label = chunk[0];
      if (label === "message") messageIndex += 1;
      var index = label === "message" ? messageIndex : -1;
      var here = byIndex[index] || [];
      var tailPosition = position === t.tail && tailText;
      here.forEach(function (b) {
        // a breakpoint before the tail sits inside the message that carries the tail: drawn there
        if (b.before !== undefined && b.before !== null && !(tailPosition && b.before === "tail")) box.appendChild(breakpointLine(b));
      });
      var value;
      try { value = JSON.parse(chunk[1]); } catch (err) { value = chunk[1]; }
      var div = el("div", "msg");
      var role = label === "message" && value && value.role ? value.role : label;
      div.appendChild(el("div", "who", (label === "message" ? "#" + index + " " : "") + role + " · " + (groups[entry.groups[position]] || "")));
      var pre = el("pre");
      var text = readable(label, value);
      var tail = tailPosition ? tailText : null;
      var cut = tail ? text.lastIndexOf(tail) : -1;
      if (cut < 0 && tail) { tail = tail.replace(/^\s+/, ""); cut = text.lastIndexOf(tail); }
      if (cut >= 0) {
        pre.appendChild(marked(text.slice(0, cut)));
        here.forEach(function (b) { if (b.before === "tail") pre.appendChild(breakpointLine(b)); });
        var span = el("span", "tail");
        span.title = "the runtime tail: scene facts, replaced on every request (ADR 0045)";
        span.appendChild(el("span", "label", "scene tail"));
        span.appendChild(marked(text.slice(cut).replace(/^\s+/, "")));
        pre.appendChild(span);
      } else {
        if (tailPosition) here.forEach(function (b) { if (b.before === "tail") pre.appendChild(breakpointLine(b)); });
        pre.appendChild(marked(text));
      }
      div.appendChild(pre);
      box.appendChild(div);
      here.forEach(function (b) { if (b.before === undefined || b.before === null) box.appendChild(breakpointLine(b)); });
    });
  }

  function chunkBlock(cls, caption, text, mark) {
    var div = el("div", "chunk " + cls);
    div.appendChild(el("div", "who", caption));
    var pre = el("pre");
    if (mark !== undefined && mark !== null) {
      pre.appendChild(el("span", "common", text.slice(0, mark)));
      pre.appendChild(el("mark", "div", text.slice(mark, mark + 1) || "⟂"));
      pre.appendChild(document.createTextNode(text.slice(mark + 1)));
    } else {
      pre.textContent = text;
    }
    div.appendChild(pre);
    return div;
  }

  // what a request is called: "capture" on a captured bot's page (its numbers are capture numbers), else "turn"
  function unitOf(s) {
    var article = document.getElementById("s" + s);
    return (article && article.dataset.unit) || "request";
  }

  function drawDiff(box, s, turnNumber) {
    var view = turnsOf(s);
    var entry = view.byTurn[turnNumber];
    var previousTurn = view.order[view.order.indexOf(turnNumber) - 1];
    var before = view.byTurn[previousTurn];
    var unit = unitOf(s) + " ";
    var t = entry.turn;
    var chunks = view.session.chunks, groups = view.session.groups;
    var div = t.div || {pos: 0, char: 0, between: true};
    box.appendChild(el("p", "meta", t.cause.replace(/_/g, " ") + (t.detail ? ": " + t.detail : "") +
      " · first divergent byte " + t.common.bytes + " (" + t.common.tokens + " tokens in common)" +
      (t.segment ? " · in segment " + t.segment : "") + " · " + div.pos + " identical chunk(s) before it"));
    function caption(side, ids, gs, position) {
      var chunk = chunks[ids[position]];
      return side + " · chunk " + position + " · " + chunk[0] + " · " + (groups[gs[position]] || "");
    }
    if (div.pos < before.chunks.length) {
      box.appendChild(chunkBlock("removed", caption(unit + previousTurn, before.chunks, before.groups, div.pos), chunks[before.chunks[div.pos]][1], div.between ? 0 : div.char));
    }
    if (div.pos < entry.chunks.length) {
      box.appendChild(chunkBlock("added", caption(unit + turnNumber, entry.chunks, entry.groups, div.pos), chunks[entry.chunks[div.pos]][1], div.between ? 0 : div.char));
    }
    if (div.pos >= before.chunks.length && div.pos >= entry.chunks.length) {
      box.appendChild(el("p", "meta", "the two requests' chunks are equal; they differ after the last chunk"));
    }
    var old = {}, now = {};
    before.chunks.slice(div.pos + 1).forEach(function (id) { old[id] = (old[id] || 0) + 1; });
    entry.chunks.slice(div.pos + 1).forEach(function (id) { now[id] = (now[id] || 0) + 1; });
    var same = 0;
    entry.chunks.slice(div.pos + 1).forEach(function (id, i) {
      var position = div.pos + 1 + i;
      if (old[id] > 0) { old[id] -= 1; same += 1; return; }
      box.appendChild(chunkBlock("added", "+ " + caption(unit + turnNumber, entry.chunks, entry.groups, position), chunks[id][1]));
    });
    before.chunks.slice(div.pos + 1).forEach(function (id, i) {
      if (now[id] > 0) { now[id] -= 1; return; }
      box.appendChild(chunkBlock("removed", "− " + caption(unit + previousTurn, before.chunks, before.groups, div.pos + 1 + i), chunks[id][1]));
    });
    if (same) box.appendChild(el("p", "meta", same + " later chunk(s) unchanged"));
  }

  // A turn's wire messages and its diff against the previous turn, added to its section when it is opened
  // (its title or its chart bar is clicked, or the page is opened at its #anchor).
  function openTurn(section) {
    if (section.dataset.drawn) return;
    section.dataset.drawn = "1";
    var s = Number(section.closest("article[data-index]").dataset.index), turn = Number(section.dataset.turn);
    var view = turnsOf(s);
    var views = [["messages", "wire messages", drawMessages]];
    if (view.order.indexOf(turn) > 0) views.push(["diff", "diff against " + unitOf(s) + " " + view.order[view.order.indexOf(turn) - 1], drawDiff]);
    views.forEach(function (v) {
      var details = el("details");
      details.dataset.view = v[0];
      details.open = true;
      details.appendChild(el("summary", null, v[1]));
      var box = el("div", "view");
      v[2](box, s, turn);
      details.appendChild(box);
      section.appendChild(details);
    });
  }

  function openTarget() {
    var id;
    try {
      id = decodeURIComponent(location.hash.slice(1));
    } catch (err) {
      return;  // a malformed fragment ("#%E0%A4%A"): names no turn, so nothing opens
    }
    if (!id) return;
    var section = document.getElementById(id);
    if (!section || !section.matches("section[data-turn]")) return;
    openTurn(section);
    section.scrollIntoView();
  }

  // a bar's tooltip is written on first hover, from its data-* hooks (a segment's title is in the HTML: its label
  // is cut to its width, and the full id must be there before any hover)
  function number(value) { return Number(value).toLocaleString("en-US"); }
  document.addEventListener("mouseover", function (event) {
    var node = event.target && event.target.closest ? event.target.closest(".bar") : null;
    if (!node || node.title) return;
    var d = node.dataset;
    var prompt = Number(d.promptTokens), cached = Number(d.cachedTokens);
    node.title = unitOf(node.closest("article[data-index]").dataset.index) + " " + d.turn + ": " + number(prompt) + " prompt tokens, " + number(cached) + " cached, " +
      number(prompt - cached) + " new" + (d.cause ? " · " + d.cause.replace(/_/g, " ") : "") +
      (d.marker === "unexpected" ? " (unexpected break)" : d.marker === "compaction" ? " (compaction)" : "");
  });
  window.addEventListener("hashchange", openTarget);
  document.addEventListener("click", function (event) {  // a second click on an open turn's link: no hashchange
    var link = event.target && event.target.closest ? event.target.closest("a[href^='#s']") : null;
    if (link && link.getAttribute("href") === location.hash) openTarget();
  });
  openTarget();
})();
