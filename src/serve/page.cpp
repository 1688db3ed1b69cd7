// The live page's table, charts panel and script. The script polls /_serve/status.json (the run
// table, progress, metric names) every 2 s with its ETag (a 304 when nothing changed), fetches a
// run's series of the chosen metric only when that run's metrics.jsonl changed, and swaps in the
// report's text when the page's ETag changed. Everything it draws from user strings goes through
// textContent, never innerHTML.
#include "normlab/serve/page.hpp"

#include <array>
#include <fstream>
#include <sstream>

#include "normlab/io/sha256.hpp"
#include "normlab/study/svg.hpp"

namespace normlab::serve {

const std::string& chart_library() {
  static const std::string text = [] {
    std::ifstream in(kChartJsPath, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return in ? out.str() : std::string();
  }();
  return text;
}

std::string sha256_base64(std::string_view text) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  io::Sha256 sha;
  sha.update(text);
  const std::array<uint8_t, 32> digest = sha.digest();
  std::string out;
  for (size_t i = 0; i < digest.size(); i += 3) {  // RFC 4648 base64 with padding
    const uint32_t group = uint32_t(digest[i]) << 16 | (i + 1 < digest.size() ? uint32_t(digest[i + 1]) << 8 : 0) |
                           (i + 2 < digest.size() ? uint32_t(digest[i + 2]) : 0);
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += i + 1 < digest.size() ? kAlphabet[group >> 6 & 63] : '=';
    out += i + 2 < digest.size() ? kAlphabet[group & 63] : '=';
  }
  return out;
}

std::string live_head() {
  return "<style id=\"serve-style\">#serve-runs{max-height:28em;overflow:auto;display:inline-block;max-width:100%}"
         "#serve-table th{cursor:pointer;user-select:none;white-space:nowrap}#serve-table "
         "td:nth-child(-n+4){text-align:left}"
         "#serve-table td:nth-child(2){white-space:nowrap}"
         ".serve-running td:nth-child(4){color:#0072b2;font-weight:bold}.serve-diverged td:nth-child(4){color:#d55e00}"
         ".serve-stopped td:nth-child(4){color:#a0522d}.serve-unreadable td:nth-child(4),.serve-error td:nth-child(4)"
         "{color:#d55e00}.serve-queued td{color:#888}#serve-note{color:#d55e00}"
         ".serve-notice{padding:4px 10px;margin:3px 0;border-left:4px solid #0072b2;background:#f4f8fc;max-width:900px}"
         ".serve-notice-diverged{border-color:#d55e00;background:#fdf0e8}.serve-notice-stopped{border-color:#a0522d}"
         ".serve-notice-finished{border-color:#009e73;background:#eef8f4}.serve-notice "
         "button{float:right;border:0;background:none;cursor:pointer}"
         "#chart-box{position:relative;height:420px;max-width:1200px}#chart-drag{position:absolute;top:0;bottom:0;"
         "background:rgba(0,114,178,.15);display:none;pointer-events:none}.serve-series{margin:2px;border:2px solid;"
         "background:#fff;cursor:pointer;border-radius:3px}.serve-series.off{opacity:.35;text-decoration:line-through}"
         "#layers-box{position:relative;height:320px;max-width:900px}#chart-hover{min-height:1.4em;font-family:"
         "monospace}.serve-help{color:#666;font-size:13px}</style>\n";
}

std::string live_top(const std::string& progress, const std::string& rows_html) {
  return "<section id=\"serve-status\"><h2>Runs</h2>\n<p><b id=\"serve-progress\">" + study::xml_escape(progress) +
         "</b> "
         "<span id=\"serve-note\"></span></p>\n<div id=\"serve-notices\"></div>\n"
         "<p><input id=\"serve-filter\" size=\"40\" placeholder=\"filter: name, variant, state, value…\"> "
         "<span id=\"serve-count\"></span> <span class=\"serve-help\">Click a column to sort (again: reverse); "
         "running runs come first until then.</span></p>\n"
         "<div id=\"serve-runs\"><table id=\"serve-table\"><thead></thead><tbody>\n" +
         rows_html +
         "</tbody></table></div></section>\n"
         "<section id=\"serve-charts\"><h2>Charts</h2>\n<p>metric <select id=\"chart-metric\"></select> against "
         "<select id=\"chart-x\"><option value=\"step\">step</option><option value=\"time\">training "
         "time</option></select> "
         "y axis <select id=\"chart-scale\"><option value=\"auto\">auto</option><option "
         "value=\"linear\">linear</option>"
         "<option value=\"logarithmic\">log</option></select> <label><input id=\"chart-heldout\" type=\"checkbox\"> "
         "with "
         "held-out loss</label> smoothing <input id=\"chart-smooth\" type=\"range\" min=\"0\" max=\"0.99\" "
         "step=\"0.01\" value=\"0\"> "
         "<span id=\"chart-smooth-value\">0</span> <button id=\"chart-reset\">reset zoom</button></p>\n"
         "<p id=\"chart-variants\"></p>\n<div id=\"chart-box\"><canvas id=\"chart-canvas\"></canvas><div "
         "id=\"chart-drag\">"
         "</div></div>\n<p id=\"chart-hover\"></p>\n<p id=\"chart-capped\" class=\"serve-help\"></p>\n"
         "<p class=\"serve-help\">One line per run, in its series' colour "
         "(a diverged run dashed). Y axis auto: a loss, gradient norm, RMS, max attention logit, update ratio or max "
         "|log Z| on a log axis ending at 10x the largest "
         "first value, so one diverged run does not flatten the rest (the runs above it are named under the chart); "
         "anything else linear. With held-out loss: each run's held-out loss on trained lengths at its evaluations, "
         "dotted with points, beside the chosen training metric. Hover: the value at the nearest point. Drag across "
         "the chart: zoom to that range. "
         "A series button shows or hides its runs; a run's box in the table shows or hides that run. Smoothing: an "
         "exponential moving average (debiased, as TensorBoard's). Training time: the sum of each step's tokens / "
         "tokens_per_s (evaluation pauses excluded). Each curve is downsampled by the server to at most 2,000 points "
         "(the lowest and highest point of each of 1,000 buckets, so spikes stay).</p></section>\n"
         "<section id=\"serve-layers\"><h2>Diagnostics per layer</h2>\n<p>diagnostic <select id=\"layers-metric\">"
         "<option value=\"attention_max_logit\">max |attention logit|</option>"
         "<option value=\"attention_entropy_mean\">attention entropy, mean over heads (nats)</option>"
         "<option value=\"attention_entropy_min\">attention entropy, min over heads (nats)</option>"
         "<option value=\"update_ratio\">update ratio ‖ΔW‖/‖W‖</option>"
         "<option value=\"layer_grad_norms\">gradient norm</option></select> "
         "<select id=\"layers-view\"><option value=\"last\">at the last diagnostics step</option>"
         "<option value=\"growth\">at the last diagnostics step ÷ at step 1</option>"
         "<option value=\"first\">at step 1 (the initial weights)</option></select></p>\n"
         "<div id=\"layers-box\"><canvas id=\"layers-canvas\">"
         "</canvas></div>\n<p id=\"layers-capped\" class=\"serve-help\"></p>\n"
         "<p class=\"serve-help\">One line per run (layer on the x axis), in its series' colour, shown and hidden with "
         "the chart above. Step 1's figures come from the forward and backward at the initial weights. A run's "
         "output log Z (the largest |log Z| over the batch's real tokens at its last diagnostics step) is the run "
         "table's |log Z| column. Robust scale: a log axis (entropy: linear), its top at 100x the median of the "
         "runs' largest values, so one run whose logits grew by 10^20 does not flatten the rest (the runs above "
         "are named).</p></section>\n"
         "<div id=\"serve-report\">\n";
}

namespace {

const char* kScript = R"JS((function(){'use strict';
var S={status:null,etag:'',page:document.getElementById('serve-live').getAttribute('data-etag'),series:{},
  heldSeries:{},hidden:{},hiddenVariants:{},sort:{key:null,dir:1},polls:0,chart:null,chartLog:null,zoom:null};
function $(id){return document.getElementById(id);}
var ORDER={running:0,stopped:1,diverged:2,error:3,unreadable:4,queued:5,finished:6};
function fmt(v,d){if(v===null||v===undefined||v==='')return '–';if(typeof v!=='number')return String(v);
  if(v!==0&&(Math.abs(v)>=1e5||Math.abs(v)<1e-3))return v.toExponential(2);return String(+v.toPrecision(d||4));}
function columns(st){var c=[['show',''],['name','run'],['variant','variant'],['state','state'],['step','step'],['eta','ETA'],
  ['loss','last loss'],['best_accuracy','best held-out acc.'],['best_loss','best held-out loss'],['log_z','|log Z|'],['lr','lr'],
  ['layers','layers'],['warmup','warmup'],['seed','seed']];
  st.extra_keys.forEach(function(k){c.push(['extra.'+k,k]);});c.push(['files','files']);return c;}
function value(r,k){if(k.indexOf('extra.')===0)return r.extra[k.slice(6)];if(k==='state')return ORDER[r.state];
  if(k==='eta')return r.eta==='–'?null:r.eta;return r[k];}
function blank(x){return x===null||x===undefined||x==='';}
function sorted(runs){var s=S.sort,out=runs.slice();out.sort(function(a,b){
  if(s.key){var x=value(a,s.key),y=value(b,s.key);if(x!==y){if(blank(x))return 1;if(blank(y))return -1;return (x<y?-1:1)*s.dir;}}
  var o=ORDER[a.state]-ORDER[b.state];if(o)return o;return a.name<b.name?-1:a.name>b.name?1:0;});return out;}
function cell(tr,text){var td=document.createElement('td');td.textContent=text;tr.appendChild(td);return td;}
function link(td,href,text){var a=document.createElement('a');a.href=href.split('/').map(encodeURIComponent).join('/');
  a.textContent=text;td.appendChild(a);td.appendChild(document.createTextNode(' '));}
function header(st){var hr=document.createElement('tr');columns(st).forEach(function(c){var th=document.createElement('th');
  th.textContent=c[1]+(S.sort.key===c[0]?(S.sort.dir>0?' ▲':' ▼'):'');th.setAttribute('data-key',c[0]);
  if(c[0]!=='show'&&c[0]!=='files')th.addEventListener('click',function(){S.sort.dir=S.sort.key===c[0]?-S.sort.dir:1;
    S.sort.key=c[0];drawTable();});hr.appendChild(th);});return hr;}
function row(st,r){var tr=document.createElement('tr');tr.className='serve-'+r.state;tr.setAttribute('data-state',r.state);
  tr.setAttribute('data-run',r.name);var box=document.createElement('input');box.type='checkbox';box.checked=!S.hidden[r.name];
  box.title='show this run in the chart';box.addEventListener('change',function(){if(box.checked)delete S.hidden[r.name];
  else S.hidden[r.name]=true;drawChart();});cell(tr,'').appendChild(box);cell(tr,r.name);
  var v=cell(tr,r.variant);if(st.colors[r.variant])v.style.borderLeft='6px solid '+st.colors[r.variant];
  cell(tr,r.state+(r.problem?' ('+r.problem+')':''));cell(tr,r.steps>0?r.step+' / '+r.steps:String(r.step));cell(tr,r.eta);
  cell(tr,fmt(r.loss));cell(tr,fmt(r.best_accuracy,3));cell(tr,fmt(r.best_loss));cell(tr,fmt(r.log_z,3));cell(tr,fmt(r.lr));cell(tr,r.layers||'–');
  cell(tr,r.warmup<0?'–':r.warmup?'on':'off');cell(tr,r.seed<0?'–':String(r.seed));
  st.extra_keys.forEach(function(k){cell(tr,blank(r.extra[k])?'–':r.extra[k]);});
  var f=cell(tr,'');if(r.state!=='queued'){var p=r.path&&r.path!=='.'?r.path+'/':'';link(f,p+'config.json','config');
  link(f,p+'metrics.jsonl','metrics');}if(r.log)link(f,r.log,'log');return tr;}
function drawTable(){var st=S.status;if(!st)return;var t=$('serve-table'),head=t.tHead,body=t.tBodies[0];
  head.textContent='';head.appendChild(header(st));body.textContent='';
  var filter=$('serve-filter').value.toLowerCase(),shown=0;
  sorted(st.runs).forEach(function(r){var tr=row(st,r);
    if(filter&&tr.textContent.toLowerCase().indexOf(filter)<0)tr.style.display='none';else shown++;body.appendChild(tr);});
  $('serve-count').textContent=shown+' of '+st.runs.length+' run(s) shown';}
function notices(old,now){if(!old)return;var before={};old.runs.forEach(function(r){before[r.name]=r.state;});
  now.runs.forEach(function(r){var was=before[r.name];if(was===undefined||was===r.state)return;
    if(r.state!=='diverged'&&r.state!=='stopped'&&r.state!=='finished')return;
    var text=r.state==='diverged'?r.name+' diverged at step '+r.step:r.state==='stopped'?r.name+' stopped at step '+r.step+
      ': nobody is training it (killed or interrupted)':r.name+' finished'+(blank(r.best_accuracy)?'':
      ', best held-out accuracy '+fmt(r.best_accuracy,3));
    var div=document.createElement('div');div.className='serve-notice serve-notice-'+r.state;div.setAttribute('role','status');
    div.textContent=new Date().toLocaleTimeString()+' — '+text;var x=document.createElement('button');x.textContent='×';
    x.title='dismiss';x.addEventListener('click',function(){div.remove();});div.appendChild(x);$('serve-notices').prepend(div);
    while($('serve-notices').children.length>8)$('serve-notices').lastChild.remove();});}
function metricChoices(){var sel=$('chart-metric'),names=S.status.metrics,cur=sel.value;
  if(Array.prototype.map.call(sel.options,function(o){return o.value;}).join('\n')===names.join('\n'))return;
  sel.textContent='';names.forEach(function(n){var o=document.createElement('option');o.value=n;o.textContent=n;sel.appendChild(o);});
  sel.value=names.indexOf(cur)>=0?cur:names.indexOf('train/loss')>=0?'train/loss':(names[0]||'');}
function heldOutMetric(){var names=S.status.metrics;if(!$('chart-heldout').checked)return '';
  return ['valid/trained/loss','valid/loss'].filter(function(n){return names.indexOf(n)>=0;})[0]||'';}
function refreshSeries(){if(!S.status)return;var metric=$('chart-metric').value,pending=[];if(!metric)return drawChart();
  var held=heldOutMetric();S.status.runs.forEach(function(r){if(!r.version||r.version==='-')return;
    [[S.series,metric],[S.heldSeries,held]].forEach(function(want){var store=want[0],m=want[1],s=store[r.name];
      if(!m||(s&&s.version===r.version&&s.metric===m))return;
      pending.push(fetch('_serve/series.json?run='+encodeURIComponent(r.name)+'&metric='+encodeURIComponent(m),
        {cache:'no-store'}).then(function(x){return x.ok?x.json():null;}).then(function(d){
        if(d)store[r.name]={version:r.version,metric:m,data:d.metrics[m]||null};}));});});
  Promise.all(pending).then(drawChart,drawChart);}
function smooth(ys,w){if(!w)return ys;var out=[],last=0,debias=0;for(var i=0;i<ys.length;i++){last=last*w+(1-w)*ys[i];
  debias=debias*w+(1-w);out.push(last/debias);}return out;}
function variants(){var box=$('chart-variants'),st=S.status;box.textContent='Series: ';Object.keys(st.colors).forEach(function(v){
  var b=document.createElement('button');b.className='serve-series'+(S.hiddenVariants[v]?' off':'');b.setAttribute('data-variant',v);
  b.textContent=v;b.style.borderColor=st.colors[v];b.addEventListener('click',function(){
    if(S.hiddenVariants[v])delete S.hiddenVariants[v];else S.hiddenVariants[v]=true;drawChart();});box.appendChild(b);});}
function lossLike(m){return /loss|grad_norm|rms|max_logit|update_ratio|log_z_max_abs/.test(m);}
function logScale(){var v=$('chart-scale').value;return v==='logarithmic'||(v==='auto'&&lossLike($('chart-metric').value));}
function datasets(){var st=S.status,metric=$('chart-metric').value,time=$('chart-x').value==='time',w=+$('chart-smooth').value,
  log=logScale(),held=heldOutMetric(),out=[];st.runs.forEach(function(r){var color=st.colors[r.variant]||'#444',
    hide=!!(S.hidden[r.name]||S.hiddenVariants[r.variant]);
    [[S.series[r.name],metric,false],[held?S.heldSeries[r.name]:null,held,true]].forEach(function(one){var s=one[0];
      if(!s||!s.data||s.metric!==one[1])return;var ys=one[2]?s.data.value:smooth(s.data.value,w),
        xs=time?s.data.time:s.data.step,pts=[];
      for(var i=0;i<xs.length;i++)if(!log||ys[i]>0)pts.push({x:xs[i],y:ys[i]});
      out.push({label:r.name+(one[2]?' held-out':''),run:r.name,metric:one[1],data:pts,borderColor:color,backgroundColor:color,
        borderWidth:one[2]?1.6:1.2,pointRadius:one[2]?2:0,pointHitRadius:4,
        borderDash:one[2]?[2,2]:r.state==='diverged'?[4,3]:[],hidden:hide});});});
  return out;}
// Auto scale of a loss: the axis ends at 10x the largest first value of the shown runs when some
// run goes above it (a diverged run's 1e21), and the runs above are named under the chart.
function capAxis(ds){var o=S.chart.options.scales.y,note=$('chart-capped');o.max=undefined;note.textContent='';
  if($('chart-scale').value!=='auto'||!lossLike($('chart-metric').value))return;var first=0,above=[];
  ds.forEach(function(d){if(!d.hidden&&d.data.length)first=Math.max(first,d.data[0].y);});if(!(first>0))return;
  var top=10*first;ds.forEach(function(d){if(!d.hidden&&d.data.some(function(p){return p.y>top;})&&above.indexOf(d.run)<0)
    above.push(d.run);});if(!above.length)return;o.max=top;
  note.textContent='Axis capped at '+fmt(top)+' (10x the largest first value); above it: '+above.join(', ')+'.';}
function hover(e,els){if(!els.length)return;var d=S.chart.data.datasets[els[0].datasetIndex],p=d.data[els[0].index];
  $('chart-hover').textContent=d.run+' — '+($('chart-x').value==='time'?'time '+fmt(p.x)+' s':'step '+p.x)+': '+
    d.metric+' = '+fmt(p.y,5);}
function drawChart(){if(!S.status)return;variants();if(typeof Chart==='undefined'){$('chart-hover').textContent=
  'Chart.js is not installed (apt-get install libjs-chart.js): no charts; the run table still updates.';return;}
  var log=logScale(),ds=datasets(),w=+$('chart-smooth').value;
  if(S.chart&&S.chartLog!==log){S.chart.destroy();S.chart=null;}
  if(!S.chart){S.chartLog=log;S.chart=new Chart($('chart-canvas'),{type:'line',data:{datasets:ds},options:{animation:false,
    parsing:false,normalized:true,responsive:true,maintainAspectRatio:false,interaction:{mode:'nearest',intersect:false},
    plugins:{legend:{display:false},tooltip:{callbacks:{label:function(c){return c.dataset.run+': '+fmt(c.parsed.y,5);}}}},
    scales:{x:{type:'linear',title:{display:true}},y:{type:log?'logarithmic':'linear',title:{display:true}}},onHover:hover}});}
  else S.chart.data.datasets=ds;var o=S.chart.options.scales;o.x.title.text=$('chart-x').value==='time'?'training time (s)':'step';
  o.y.title.text=$('chart-metric').value+(w?' (smoothed '+w+')':'');o.x.min=S.zoom?S.zoom[0]:undefined;
  o.x.max=S.zoom?S.zoom[1]:undefined;capAxis(ds);S.chart.update('none');var root=document.documentElement;
  root.setAttribute('data-chart-datasets',ds.length);
  root.setAttribute('data-chart-visible',ds.filter(function(d){return !d.hidden;}).length);drawLayers();}
// The per-layer chart: each run's figures at one diagnostics record (or their growth since step 1),
// layer on x. Robust: on a log axis the top is 100x the median of the shown runs' largest values.
function layerValues(r,metric,view){var d=r.diagnostics||{},last=d.last&&d.last[metric],first=d.first&&d.first[metric];
  if(view==='first')return d.first&&d.first.step===1?first:null;if(view==='last')return last;
  if(!last||!first||d.first.step!==1)return null;return last.map(function(v,i){
    return v===null||first[i]===null||!(first[i]>0)?null:v/first[i];});}
function drawLayers(){var st=S.status,root=document.documentElement;if(!st||typeof Chart==='undefined')return;
  var metric=$('layers-metric').value,view=$('layers-view').value,log=view==='growth'||!/entropy/.test(metric),ds=[],tops=[];
  st.runs.forEach(function(r){var ys=layerValues(r,metric,view);if(!ys||!ys.length)return;var pts=[],top=null;
    ys.forEach(function(y,i){if(y===null||(log&&!(y>0)))return;pts.push({x:i,y:y});if(top===null||y>top)top=y;});
    if(!pts.length)return;var color=st.colors[r.variant]||'#444';tops.push(top);
    ds.push({label:r.name,run:r.name,data:pts,top:top,borderColor:color,backgroundColor:color,borderWidth:1.2,pointRadius:2,
      borderDash:r.state==='diverged'?[4,3]:[],hidden:!!(S.hidden[r.name]||S.hiddenVariants[r.variant])});});
  if(S.layers&&S.layersLog!==log){S.layers.destroy();S.layers=null;}
  if(!S.layers){S.layersLog=log;S.layers=new Chart($('layers-canvas'),{type:'line',data:{datasets:ds},options:{animation:false,
    parsing:false,normalized:true,responsive:true,maintainAspectRatio:false,plugins:{legend:{display:false},
    tooltip:{callbacks:{label:function(c){return c.dataset.run+': layer '+c.parsed.x+' = '+fmt(c.parsed.y,4);}}}},
    scales:{x:{type:'linear',title:{display:true,text:'layer'},ticks:{stepSize:1}},y:{type:log?'logarithmic':'linear',
    title:{display:true}}}}});}else S.layers.data.datasets=ds;
  var y=S.layers.options.scales.y,note=$('layers-capped'),shown=tops.slice().sort(function(a,b){return a-b;}),above=[];
  y.title.text=$('layers-metric').selectedOptions[0].textContent+(view==='growth'?' ÷ step 1':view==='first'?' at step 1':'');
  y.max=undefined;note.textContent='';if(log&&shown.length){var cap=100*shown[Math.floor((shown.length-1)/2)];
    ds.forEach(function(d){if(d.top>cap&&!d.hidden)above.push(d.run);});if(above.length){y.max=cap;
      note.textContent='Axis capped at '+fmt(cap)+' (100x the median of the runs\' largest values); above it: '+above.join(', ')+'.';}}
  S.layers.update('none');root.setAttribute('data-layers-datasets',ds.length);root.setAttribute('data-layers-capped',above.length);}
function swapPage(text){var doc=new DOMParser().parseFromString(text,'text/html'),now=doc.getElementById('serve-report'),
  cur=$('serve-report'),top=$('serve-status'),y=window.scrollY;if(!now||!cur)return;cur.replaceChildren.apply(cur,
  Array.prototype.map.call(now.childNodes,function(n){return document.importNode(n,true);}));
  while(top.previousSibling)top.previousSibling.remove();
  for(var n=doc.getElementById('serve-status').previousSibling,nodes=[];n;n=n.previousSibling)nodes.unshift(n);
  nodes.forEach(function(n){top.before(document.importNode(n,true));});document.title=doc.title;window.scrollTo(0,y);}
function poll(){fetch('_serve/status.json',{cache:'no-store',headers:{'If-None-Match':S.etag}}).then(function(r){
  if(r.status===304)return null;if(!r.ok)throw new Error(r.status);S.etag=r.headers.get('ETag')||'';return r.json();})
  .then(function(st){var page=null;if(st){notices(S.status,st);S.status=st;$('serve-progress').textContent=st.progress;
    drawTable();metricChoices();refreshSeries();if(st.page!==S.page){page=st.page;}}$('serve-note').textContent='';
    return page?fetch('./',{cache:'no-store'}).then(function(r){return r.ok?r.text():null;}).then(function(text){
      if(text){swapPage(text);S.page=page;}}):null;})
  .then(function(){document.documentElement.setAttribute('data-serve-polls',++S.polls);setTimeout(poll,2000);})
  .catch(function(){$('serve-note').textContent='normlab serve does not answer: this page is not updating.';setTimeout(poll,5000);});}
var drag=null,canvas=$('chart-canvas'),band=$('chart-drag');
canvas.addEventListener('mousedown',function(e){drag=e.offsetX;});
canvas.addEventListener('mousemove',function(e){if(drag===null)return;band.style.display='block';
  band.style.left=Math.min(drag,e.offsetX)+'px';band.style.width=Math.abs(e.offsetX-drag)+'px';});
window.addEventListener('mouseup',function(e){if(drag===null)return;band.style.display='none';var from=drag;drag=null;
  if(!S.chart||e.target!==canvas||Math.abs(e.offsetX-from)<5)return;var x=S.chart.scales.x,
  a=x.getValueForPixel(from),b=x.getValueForPixel(e.offsetX);S.zoom=[Math.min(a,b),Math.max(a,b)];drawChart();});
$('chart-reset').addEventListener('click',function(){S.zoom=null;drawChart();});
$('chart-metric').addEventListener('change',refreshSeries);
$('chart-x').addEventListener('change',function(){S.zoom=null;drawChart();});
$('chart-scale').addEventListener('change',drawChart);
$('layers-metric').addEventListener('change',drawLayers);
$('layers-view').addEventListener('change',drawLayers);
$('chart-heldout').addEventListener('change',refreshSeries);
$('chart-smooth').addEventListener('input',function(){$('chart-smooth-value').textContent=this.value;drawChart();});
$('serve-filter').addEventListener('input',drawTable);
poll();})();)JS";

}  // namespace

std::string live_script(const std::string& etag) {
  const std::string chart = chart_library().empty() ? ""
                                                    : "<script src=\"_serve/chart.js\" integrity=\"sha256-" +
                                                          sha256_base64(chart_library()) + "\"></script>\n";
  return "</div>\n" + chart + "<script id=\"serve-live\" data-etag=\"" + study::xml_escape(etag) + "\">" + kScript +
         "</script>\n";
}

}  // namespace normlab::serve
