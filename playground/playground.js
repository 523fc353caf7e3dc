// The playground page: loads Pyodide and pykraft's Python from bundle.js,
// then only draws what the Python driver (jepsen_like/sim/_playground.py,
// PageDriver) says and forwards clicks to it as actions. No simulation
// logic lives here: time, faults, clients and checks are all Python.
(function () {
  'use strict';
  var FILES = window.PYKRAFT_FILES || {};
  var $ = function (id) { return document.getElementById(id); };
  var SVG = 'http://www.w3.org/2000/svg';

  function bytesOf(name) {
    if (typeof Uint8Array.fromBase64 === 'function') return Uint8Array.fromBase64(FILES[name]);
    var text = atob(FILES[name]);
    var out = new Uint8Array(text.length);
    for (var i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
    return out;
  }

  // Browsers refuse fetch() on file:// pages; Pyodide fetches its wasm, its
  // standard library and its lock file. Answer those from the bundle, and
  // refuse everything else: the page never touches the network.
  window.fetch = function (input) {
    var url = typeof input === 'string' ? input : (input && input.url) || String(input);
    var name = url.split('?')[0].split('#')[0].split('/').pop();
    if (Object.prototype.hasOwnProperty.call(FILES, name)) {
      var type = /\.wasm$/.test(name) ? 'application/wasm' : /\.json$/.test(name) ? 'application/json' : 'application/octet-stream';
      return Promise.resolve(new Response(bytesOf(name), { status: 200, headers: { 'Content-Type': type } }));
    }
    return Promise.reject(new TypeError('the playground fetches nothing from the network: ' + url));
  };

  var py = null, mod = null, lessonsMod = null, driver = null;
  var state = { playing: false, speed: 1, lesson: '', lessons: [], lastFrame: 0, view: null, lessonDone: false };

  // The first load, phase by phase: milliseconds from the navigation's
  // start (performance's time origin) to the end of each phase, also as
  // performance marks ('playground:NAME'). The benchmark and the browser
  // test read them (window.playground.timings).
  var timings = {};
  function mark(name) {
    timings[name] = Math.round(performance.now());
    if (performance.mark) performance.mark('playground:' + name);
  }
  mark('scripts-parsed');  // bundle.js, Pyodide's two scripts and this one
  function status(text) { $('load-status').textContent = text; }

  function newDriver(seed, options) {
    var next;
    try {
      next = mod.PageDriver.from_json(seed, JSON.stringify(options));
    } catch (error) {
      alert('cannot start that cluster: ' + String(error).split('\n').filter(Boolean).pop());
      return;
    }
    if (driver) driver.destroy();
    driver = next;
    $('opt-cq').checked = options.check_quorum !== false;
    $('opt-pv').checked = options.pre_vote !== false;
    $('opt-brokers').checked = !!options.brokers;
  }

  function view() { state.view = JSON.parse(driver.view_json()); return state.view; }

  // ---------------------------------------------------------------- actions
  function act(fields) {
    var refused = driver.act(JSON.stringify(fields));
    if (refused) { console.warn('refused: ' + refused); }
    render();
    return refused;
  }

  function advance(untilUs) { driver.advance(Math.round(untilUs)); render(); }

  var writeCounter = 0;
  function nextValue() { writeCounter += 1; return 'v' + writeCounter; }

  // ---------------------------------------------------------------- drawing
  var ROLE_CLASS = { leader: 'leader', follower: 'follower', candidate: 'candidate', prospective: 'candidate', unattached: 'unattached', resigned: 'unattached' };
  var ROLE_FILL = { leader: '#1e3a8a', follower: '#60a5fa', candidate: '#f59e0b', unattached: '#d1d5db' };

  function epochColour(epoch) { return 'hsl(' + ((epoch * 67) % 360) + ',65%,42%)'; }

  function positions(v) {
    var out = {};
    var voters = v.nodes.filter(function (n) { return n.broker === null; });
    var brokers = v.nodes.filter(function (n) { return n.broker !== null; });
    var cy = brokers.length ? 150 : 200, radius = brokers.length ? 110 : 150;
    voters.forEach(function (n, i) {
      var angle = -Math.PI / 2 + (2 * Math.PI * i) / voters.length;
      out[n.id] = [230 + radius * Math.cos(angle), cy + radius * Math.sin(angle)];
    });
    brokers.forEach(function (n, i) { out[n.id] = [230 + (i - (brokers.length - 1) / 2) * 84, 355]; });
    return out;
  }

  function name(id, v) { return (id > v.voters ? 'b' : 'n') + id; }

  function pairs(v) {
    // every voter pair, and each broker with each voter (brokers talk only to voters)
    var out = [];
    v.nodes.forEach(function (a) {
      v.nodes.forEach(function (b) {
        if (a.id < b.id && a.broker === null) out.push([a.id, b.id]);
      });
    });
    return out;
  }

  function el(tag, attrs, text) {
    var node = document.createElementNS(SVG, tag);
    for (var key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function drawCluster(v) {
    var svg = $('cluster');
    svg.textContent = '';
    var pos = positions(v);
    var cut = {};
    v.cut.forEach(function (pair) { cut[pair[0] + '-' + pair[1]] = true; });
    pairs(v).forEach(function (pair) {
      var a = pair[0], b = pair[1];
      svg.appendChild(el('line', { x1: pos[a][0], y1: pos[a][1], x2: pos[b][0], y2: pos[b][1], 'class': 'link' + (cut[a + '-' + b] ? ' cut' : '') }));
    });
    v.messages.forEach(function (m) {
      var p = pos[m.src], q = pos[m.dst];
      if (!p || !q) return;
      var f;
      if (m.arrive_us === null) f = 0.35; else f = (v.now_us - m.sent_us) / Math.max(1, m.arrive_us - m.sent_us);
      f = Math.max(0, Math.min(1, f));
      var dx = q[0] - p[0], dy = q[1] - p[1], len = Math.sqrt(dx * dx + dy * dy) || 1;
      var ux = dx / len, uy = dy / len, ox = -uy * 6, oy = ux * 6; // offset: two directions side by side
      var x = p[0] + dx * (0.15 + 0.7 * f) + ox, y = p[1] + dy * (0.15 + 0.7 * f) + oy;
      var colour = m.dropped ? '#dc2626' : epochColour(m.epoch);
      var g = el('g', { 'class': 'msg-g', 'data-type': m.type });
      g.appendChild(el('line', { x1: x - ux * 12, y1: y - uy * 12, x2: x, y2: y, 'class': 'msg' + (m.dropped ? ' dropped' : ''), stroke: colour }));
      g.appendChild(el('polygon', { points: [x + ux * 5, y + uy * 5, x - uy * 4, y + ux * 4, x + uy * 4, y - ux * 4].join(','), fill: colour }));
      if (m.dropped) g.appendChild(el('text', { x: x, y: y + 5, 'class': 'drop' }, '×'));
      g.appendChild(el('text', { x: x + 6, y: y - 4, 'class': 'msg-label' }, m.type));
      svg.appendChild(g);
    });
    v.nodes.forEach(function (n) {
      var p = pos[n.id];
      var role = n.up ? (ROLE_CLASS[n.role] || 'unattached') : 'down';
      var g = el('g', { 'class': 'node ' + role + (n.paused ? ' paused' : '') + (n.up ? '' : ' down') + (n.broker ? ' broker' : ''), 'data-node': n.id });
      if (n.broker) {
        var fill = !n.up ? '#fff' : n.broker.state === 'Online' ? '#16a34a' : n.broker.state === 'Fenced' ? '#f59e0b' : '#d1d5db';
        g.appendChild(el('rect', { x: p[0] - 36, y: p[1] - 24, width: 72, height: 48, rx: 8, fill: fill, stroke: n.up ? '#111827' : '#dc2626', 'stroke-width': n.up ? 1.5 : 3 }));
        g.appendChild(el('text', { x: p[0], y: p[1] - 8, 'font-weight': 700 }, name(n.id, v)));
        g.appendChild(el('text', { x: p[0], y: p[1] + 6 }, n.up ? n.broker.state : 'DOWN'));
        if (n.up && n.broker.epoch !== null) g.appendChild(el('text', { x: p[0], y: p[1] + 19 }, 'epoch ' + n.broker.epoch));
        svg.appendChild(g);
        return;
      }
      g.appendChild(el('circle', { cx: p[0], cy: p[1], r: 32, fill: ROLE_FILL[role] || '#fff' }));
      var light = role === 'leader';
      g.appendChild(el('text', { x: p[0], y: p[1] - 6, fill: light ? '#fff' : '#111827', 'font-weight': 700 }, name(n.id, v)));
      g.appendChild(el('text', { x: p[0], y: p[1] + 8, fill: light ? '#fff' : '#111827' }, n.up ? (n.role + ' e' + n.epoch) : 'DOWN'));
      if (n.paused) g.appendChild(el('text', { x: p[0], y: p[1] + 22, fill: '#111827' }, 'paused'));
      svg.appendChild(g);
    });
  }

  function button(label, fields, extra) {
    var b = document.createElement('button');
    b.type = 'button';
    b.textContent = label;
    b.dataset.do = fields.do;
    if (fields.node !== undefined) b.dataset.node = fields.node;
    if (fields.peer !== undefined) b.dataset.peer = fields.peer;
    if (fields.mode !== undefined) b.dataset.mode = fields.mode;
    if (fields.zone !== undefined) b.dataset.zone = fields.zone;
    if (extra) b.dataset.extra = extra;
    b.addEventListener('click', function () {
      if (extra === 'x10') {
        for (var i = 0; i < 10; i++) act({ do: 'write', node: fields.node, key: 'k', value: nextValue() });
        return;
      }
      var f = Object.assign({}, fields);
      if (f.do === 'write') f.value = nextValue();
      act(f);
    });
    return b;
  }

  // Cut every link of a node: one 'cut' action per link, as clicks would be.
  function isolateButton(id, v) {
    var b = document.createElement('button');
    b.type = 'button';
    b.textContent = 'isolate';
    b.dataset.isolate = id;
    b.addEventListener('click', function () {
      var cut = {};
      v.cut.forEach(function (pair) { cut[pair[0] + '-' + pair[1]] = true; });
      pairs(state.view).forEach(function (pair) {
        if ((pair[0] === id || pair[1] === id) && !cut[pair[0] + '-' + pair[1]]) act({ do: 'cut', node: pair[0], peer: pair[1] });
      });
    });
    return b;
  }

  function drawLinks(v) {
    var box = $('links');
    box.textContent = '';
    var cut = {};
    v.cut.forEach(function (pair) { cut[pair[0] + '-' + pair[1]] = true; });
    pairs(v).forEach(function (pair) {
      var a = pair[0], b = pair[1];
      var isCut = !!cut[a + '-' + b];
      var btn = button((isCut ? 'mend ' : 'cut ') + name(a, v) + '–' + name(b, v), { do: isCut ? 'mend' : 'cut', node: a, peer: b });
      if (isCut) btn.className = 'cut';
      box.appendChild(btn);
    });
    // A zone in one click: every link between its nodes and the others.
    var zoneNames = Object.keys(v.zones);
    if (zoneNames.length > 1) {
      zoneNames.forEach(function (zone) {
        var inside = v.zones[zone], whole = true;
        v.nodes.forEach(function (n) {
          if (inside.indexOf(n.id) >= 0) return;
          inside.forEach(function (m) { if (!cut[Math.min(m, n.id) + '-' + Math.max(m, n.id)]) whole = false; });
        });
        var members = inside.map(function (id) { return name(id, v); }).join(' ');
        var zb = button((whole ? 'mend zone ' : 'cut zone ') + zone + ' (' + members + ')', { do: whole ? 'mend_zone' : 'cut_zone', zone: zone });
        if (whole) zb.className = 'cut';
        box.appendChild(zb);
      });
    }
    box.appendChild(button('heal all', { do: 'heal' }));
    if (v.brokers) box.appendChild(button('add broker', { do: 'add_broker' }));
  }

  var TIMER_SCALE_MS = 3000;
  function drawNodes(v) {
    var box = $('nodes');
    box.textContent = '';
    v.nodes.forEach(function (n) {
      var card = document.createElement('div');
      card.className = 'card ' + (n.up ? 'role-' + n.role : 'is-down');
      card.dataset.node = n.id;
      var head = document.createElement('div');
      head.className = 'head';
      var broker = n.broker ? (n.up ? '<span class="broker-state">broker ' + n.broker.state + ', broker epoch ' + (n.broker.epoch === null ? '–' : n.broker.epoch) +
        ', heartbeats answered ' + n.broker.heartbeats + (n.broker.last_heartbeat_ms === null ? '' : ' (last at ' + (n.broker.last_heartbeat_ms / 1000).toFixed(2) + ' s)') + '</span>' : '') : '';
      head.innerHTML = '<b>' + name(n.id, v) + '</b><span class="zone">' + n.zone + '</span>' + broker + (n.up
        ? '<span class="role">' + n.role + (n.paused ? ' (paused)' : '') + '</span><span>epoch ' + n.epoch + '</span><span>vote ' +
          (n.vote === null ? '–' : 'n' + n.vote) + '</span><span>leader ' + (n.leader === null ? '–' : 'n' + n.leader) +
          '</span><span>HW ' + n.hw + '</span><span>log ' + n.log_start + '..' + n.log_end + '</span>'
        : '<span class="role">down</span>');
      card.appendChild(head);
      var buttons = document.createElement('div');
      buttons.className = 'buttons';
      buttons.appendChild(n.up ? button('crash', { do: 'crash', node: n.id }) : button('restart', { do: 'restart', node: n.id }));
      if (n.up) buttons.appendChild(n.paused ? button('resume', { do: 'resume', node: n.id }) : button('pause', { do: 'pause', node: n.id }));
      buttons.appendChild(isolateButton(n.id, v));
      if (!v.brokers) {
        buttons.appendChild(button('write', { do: 'write', node: n.id, key: 'k' }));
        buttons.appendChild(button('10 writes', { do: 'write', node: n.id, key: 'k' }, 'x10'));
        buttons.appendChild(button('read (linearizable)', { do: 'read', node: n.id, key: 'k', mode: 'linearizable' }));
        buttons.appendChild(button('read (leader-local)', { do: 'read', node: n.id, key: 'k', mode: 'leader-local' }));
      } else if (n.broker) {
        buttons.appendChild(button('read metadata (list topics)', { do: 'read', node: n.id, key: 'k', mode: 'linearizable' }));
      } else {
        buttons.appendChild(button('create topic', { do: 'write', node: n.id, key: 'k' }));
      }
      (n.broker ? [] : ['check_quorum', 'pre_vote']).forEach(function (option) {
        var label = document.createElement('label');
        var box2 = document.createElement('input');
        box2.type = 'checkbox';
        box2.checked = n.settings[option];
        box2.dataset.option = option;
        box2.dataset.node = n.id;
        box2.addEventListener('change', function () { act({ do: 'set', node: n.id, option: option, on: box2.checked }); });
        label.appendChild(box2);
        var running = n.up ? (n[option] ? ' (on now)' : ' (off now)') : '';
        label.appendChild(document.createTextNode(' ' + option.replace('_', ' ') + running));
        label.title = 'takes effect when the process next starts';
        buttons.appendChild(label);
      });
      card.appendChild(buttons);
      if (n.up) {
        Object.keys(n.timers).sort().forEach(function (name) {
          var left = n.timers[name];
          var row = document.createElement('div');
          row.className = 'timer';
          row.innerHTML = '<span style="width:90px">' + name.replace('_', ' ') + '</span><span class="track"><span class="fill" style="display:block;width:' +
            Math.max(0, Math.min(100, (100 * left) / TIMER_SCALE_MS)) + '%"></span></span><span>' + (left / 1000).toFixed(2) + ' s</span>';
          card.appendChild(row);
        });
        var log = document.createElement('div');
        log.className = 'log';
        if (n.snapshot_end !== null) log.innerHTML = '<span class="snap">snapshot ..' + n.snapshot_end + '</span>';
        n.log.forEach(function (rec) {
          if (rec[0] === n.hw) { var hw = document.createElement('span'); hw.className = 'hw'; hw.title = 'high watermark ' + n.hw; log.appendChild(hw); }
          var cell = document.createElement('span');
          cell.className = 'rec ' + (rec[0] < n.hw ? 'committed' : 'uncommitted');
          cell.style.background = epochColour(rec[1]);
          cell.title = 'offset ' + rec[0] + ', epoch ' + rec[1] + (rec[0] < n.hw ? ', committed' : ', not committed');
          cell.textContent = rec[1];
          log.appendChild(cell);
        });
        if (n.hw >= n.log_end) { var hw2 = document.createElement('span'); hw2.className = 'hw'; hw2.title = 'high watermark ' + n.hw; log.appendChild(hw2); }
        card.appendChild(log);
      }
      box.appendChild(card);
    });
  }

  var OPS_WINDOW_US = 20e6;
  function drawOps(v) {
    var svg = $('ops');
    svg.textContent = '';
    var end = Math.max(v.now_us, OPS_WINDOW_US), start = end - OPS_WINDOW_US;
    var x = function (us) { return 40 + (860 * (us - start)) / OPS_WINDOW_US; };
    for (var s = Math.ceil(start / 1e6); s * 1e6 <= end; s += 2) {
      svg.appendChild(el('line', { x1: x(s * 1e6), y1: 0, x2: x(s * 1e6), y2: 150, stroke: '#f3f4f6' }));
      svg.appendChild(el('text', { x: x(s * 1e6), y: 158, 'font-size': 9, 'text-anchor': 'middle', fill: '#6b7280' }, s + ' s'));
    }
    var shown = v.ops.slice(-14);
    shown.forEach(function (op, i) {
      var y = 4 + i * 10;
      var to = op.end_us === null ? v.now_us : op.end_us;
      var cls = op.stale ? 'op-stale' : 'op-' + op.type;
      svg.appendChild(el('rect', { x: Math.max(40, x(op.start_us)), y: y, width: Math.max(3, x(to) - Math.max(40, x(op.start_us))), height: 7, 'class': cls }));
      svg.appendChild(el('text', { x: 2, y: y + 7, 'font-size': 8 }, 'p' + op.process + ' ' + op.f));
    });
    var list = $('ops-list');
    list.textContent = '';
    v.ops.slice(-30).reverse().forEach(function (op) {
      var li = document.createElement('li');
      li.className = op.stale ? 'stale' : '';
      li.textContent = 'p' + op.process + ' ' + op.f + ' ' + op.key + (op.f === 'write' || op.f === 'create_topic' ? ' ' + op.value : '') +
        (op.node === null ? '' : ' via ' + name(op.node, v)) +
        (op.mode ? ' (' + op.mode + ')' : '') + ': ' + op.type + (op.f === 'read' && op.type === 'ok' ? ' ' + op.value : '') +
        (op.error ? ' ' + op.error : '') + (op.stale ? '  STALE READ' : '') + '  [' + (op.start_us / 1e6).toFixed(3) + ' s]';
      list.appendChild(li);
    });
  }

  function drawTrace(v) {
    var pre = $('trace');
    pre.textContent = v.trace.join('\n');
    pre.scrollTop = pre.scrollHeight;
  }

  function checkLesson() {
    if (!state.lesson) { $('lesson-check').textContent = ''; return; }
    var result = JSON.parse(lessonsMod.check_json(state.lesson, driver));
    state.lessonDone = result.done;
    var box = $('lesson-check');
    box.className = result.done ? 'done' : 'todo';
    box.textContent = (result.done ? '✔ done: ' : '… ') + result.detail;
    document.body.dataset.lessonDone = String(result.done);
  }

  function render() {
    var v = view();
    $('now').textContent = (v.now_us / 1e6).toFixed(3);
    var slider = $('rewind');
    slider.max = Math.ceil(v.horizon_us / 1000);
    if (!slider.matches(':active')) slider.value = Math.round(v.now_us / 1000);
    drawCluster(v);
    drawLinks(v);
    drawNodes(v);
    drawOps(v);
    drawTrace(v);
    checkLesson();
    document.body.dataset.t = v.now_us;
    document.body.dataset.leader = v.leader === null ? '' : v.leader;
  }

  // ---------------------------------------------------------------- time
  function frame(ts) {
    if (state.playing) {
      var dt = Math.min(100, ts - (state.lastFrame || ts));
      driver.advance(Math.round(state.view.now_us + dt * 1000 * state.speed));
      render();
    }
    state.lastFrame = ts;
    requestAnimationFrame(frame);
  }

  function setPlaying(on) {
    state.playing = on;
    $('b-play').textContent = on ? '❚❚ pause' : '▶ play';
  }

  // ---------------------------------------------------------------- sessions
  function b64urlEncode(text) {
    var bytes = new TextEncoder().encode(text), bin = '';
    for (var i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }
  function b64urlDecode(text) {
    var bin = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    return new TextDecoder().decode(bytes);
  }
  function shareUrl() { return location.href.split('#')[0] + '#session=' + b64urlEncode(driver.session_json()); }

  function loadSession(json) {
    setPlaying(false);
    var refused = driver.load(json);
    if (refused) { alert('not a playground session: ' + refused); return refused; }
    var doc = JSON.parse(json);
    $('seed').value = doc.seed;
    render();
    return '';
  }

  function startLesson(id) {
    state.lesson = id;
    var lesson = state.lessons.filter(function (l) { return l.id === id; })[0];
    $('lesson-title').textContent = lesson ? lesson.title + ':' : '';
    $('lesson-goal').textContent = lesson ? lesson.goal : '';
    $('lesson-hint').textContent = lesson ? lesson.hint : '';
    $('lesson-select').value = id;
    if (lesson) {
      setPlaying(false);
      newDriver(lesson.seed, lesson.options);
      $('seed').value = lesson.seed;
    }
    render();
  }

  function wire() {
    $('b-play').addEventListener('click', function () { setPlaying(!state.playing); });
    $('b-step').addEventListener('click', function () { setPlaying(false); driver.step(); render(); });
    $('b-skip').addEventListener('click', function () { advance(state.view.now_us + 1e6); });
    $('speed').addEventListener('change', function () { state.speed = parseFloat($('speed').value); });
    $('rewind').addEventListener('change', function () { setPlaying(false); driver.rewind(parseInt($('rewind').value, 10) * 1000); render(); });
    $('b-new').addEventListener('click', function () {
      setPlaying(false);
      state.lesson = '';
      $('lesson-select').value = '';
      startLesson('');
      newDriver(parseInt($('seed').value, 10) || 0, { check_quorum: $('opt-cq').checked, pre_vote: $('opt-pv').checked, brokers: $('opt-brokers').checked });
      render();
    });
    $('b-share').addEventListener('click', function () {
      var url = shareUrl();
      history.replaceState(null, '', url);
      if (navigator.clipboard) navigator.clipboard.writeText(url).catch(function () {});
    });
    $('b-save').addEventListener('click', function () {
      var blob = new Blob([driver.session_json()], { type: 'application/json' });
      var a = document.createElement('a');
      a.href = URL.createObjectURL(blob);
      a.download = 'playground-session.json';
      a.click();
    });
    $('load-file').addEventListener('change', function (event) {
      var file = event.target.files[0];
      if (file) file.text().then(loadSession);
    });
    $('lesson-select').addEventListener('change', function () { startLesson($('lesson-select').value); });
    document.addEventListener('keydown', function (event) {
      if (event.target.tagName === 'INPUT' || event.target.tagName === 'SELECT') return;
      if (event.key === ' ') { event.preventDefault(); setPlaying(!state.playing); }
    });
  }

  // ---------------------------------------------------------------- the API the tests use
  window.playground = {
    view: function () { return view(); },
    act: act,
    advance: function (us) { advance(us); return state.view; },
    step: function () { driver.step(); render(); return state.view; },
    rewind: function (us) { driver.rewind(Math.round(us)); render(); return state.view; },
    traceText: function () { return driver.trace_text(); },
    session: function () { return driver.session_json(); },
    shareUrl: shareUrl,
    lessonCheck: function () { checkLesson(); return { lesson: state.lesson, done: state.lessonDone, detail: $('lesson-check').textContent }; },
    // Simulated events per wall-clock second over a fresh run of the lesson-free cluster.
    bench: function (simulatedSeconds) {
      var bench = mod.PageDriver.from_json(11, '{}');
      var begin = performance.now();
      bench.advance(Math.round(simulatedSeconds * 1e6));
      var seconds = (performance.now() - begin) / 1000;
      var events = JSON.parse(bench.view_json()).events;
      bench.destroy();
      return { events: events, seconds: seconds, events_per_s: events / seconds };
    },
  };

  async function main() {
    status('starting Pyodide ' + window.PYKRAFT_PYODIDE_VERSION);
    var base = location.href.split('#')[0].split('?')[0].replace(/[^/]*$/, '');
    // No packages: the page needs nothing beyond the standard library and
    // its own zip (msgpack's pure-Python modules are in it).
    py = await loadPyodide({ indexURL: base, packages: [], stdout: function (s) { console.log(s); }, stderr: function (s) { console.warn(s); } });
    mark('pyodide-booted');
    status('importing pykraft');
    // zipimport reads the zip in place: compiled .pyc beside each source
    // when the build had Node.js (tools/build_playground.py).
    py.FS.writeFile(window.PYKRAFT_ZIP_PATH, bytesOf('pykraft.zip'));
    py.runPython("import sys; sys.path.insert(0, " + JSON.stringify(window.PYKRAFT_ZIP_PATH) + ")");
    mod = py.pyimport('jepsen_like.sim._playground');
    mark('playground-imported');
    lessonsMod = py.pyimport('jepsen_like.sim._lessons');
    mark('lessons-imported');
    state.lessons = JSON.parse(lessonsMod.lessons_json());
    state.lessons.forEach(function (l) {
      var option = document.createElement('option');
      option.value = l.id;
      option.textContent = l.title;
      $('lesson-select').appendChild(option);
    });
    newDriver(7, {});
    wire();
    var hash = location.hash.replace(/^#/, '');
    var params = new URLSearchParams(hash);
    if (params.get('session')) loadSession(b64urlDecode(params.get('session')));
    else if (params.get('lesson')) startLesson(params.get('lesson'));
    mark('first-steps');
    render();
    mark('first-render');
    status('ready');
    window.playground.timings = timings;
    // From the navigation's start (performance's time origin), not this script's.
    document.body.dataset.loadMs = Math.round(performance.now());
    document.body.classList.add('playground-ready');
    requestAnimationFrame(frame);
  }

  main().catch(function (error) {
    document.body.classList.add('playground-failed');
    status('failed: ' + error);
    console.error(error);
    window.playground.error = String(error);
  });
})();
