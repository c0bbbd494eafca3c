#include "html.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/outfile.h"

/* The page's style and script: plain SVG and DOM, no library. */
static const char PAGE_HEAD[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<title>dpsim timeline</title>\n<style>\n"
    "body{font:14px system-ui,sans-serif;margin:16px;color:#222}\n"
    "h1{font-size:18px;margin:0 0 8px}\n"
    ".bar{display:flex;gap:8px;align-items:center;margin:8px 0}\n"
    "button{font:inherit;padding:2px 10px}\n"
    ".panel h2{font-size:14px;margin:14px 0 2px}\n"
    "svg{display:block}\n"
    "rect.op{stroke:#333;stroke-width:0.5}\n"
    "rect.op.later{opacity:0.25}\n"
    "rect.op:hover{stroke:#000;stroke-width:2}\n"
    "text.lbl{font-size:10px;pointer-events:none;text-anchor:middle;dominant-baseline:central}\n"
    "text.axis{font-size:11px;fill:#555}\n"
    "line.cursor{stroke:#d62728;stroke-width:1.5}\n"
    "#tip{position:fixed;pointer-events:none;background:#fffbe6;border:1px solid #999;"
    "padding:4px 8px;font-size:12px;display:none;white-space:pre}\n"
    "</style></head><body>\n";

static const char PAGE_SCRIPT[] =
    "<script>\n"
    "(function(){\n"
    "'use strict';\n"
    "var D=JSON.parse(document.getElementById('dpsim-data').textContent);\n"
    "var NS='http://www.w3.org/2000/svg';\n"
    "var W=1200,L=70,ROW=34,MEMH=60;\n"
    "var FWD=['#4c9be8','#9cc8f2','#1f5fa8','#6fb0ee'],BWD=['#e8744c','#f2b09a','#b04a25','#ee9473'];\n"
    "var OPN=['forward','backward','weight gradients'];\n"
    "var tmax=1;D.panels.forEach(function(p){p.ops.forEach(function(o){tmax=Math.max(tmax,o.t1);});});\n"
    "function x(t){return L+(W-L-10)*t/tmax;}\n"
    "function el(n,a,parent){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);"
    "if(parent)parent.appendChild(e);return e;}\n"
    "function memAt(p,s,t){var v=null;p.mem.forEach(function(m){if(m.stage===s&&m.t<=t)v=m.mb;});return v;}\n"
    "var lo=Infinity,hi=-Infinity;D.panels.forEach(function(p){p.mem.forEach(function(m){lo=Math.min(lo,m.mb);hi=Math.max(hi,m.mb);});});\n"
    "if(!(hi>lo)){lo=isFinite(lo)?lo:0;hi=lo+1;}\n"
    "var tip=document.getElementById('tip'),root=document.getElementById('panels');\n"
    "var cursors=[],rects=[],ends=[];\n"
    "document.getElementById('title').textContent=D.title;\n"
    "D.panels.forEach(function(p,pi){\n"
    "  var div=document.createElement('div');div.className='panel';root.appendChild(div);\n"
    "  var h=document.createElement('h2');h.textContent=p.heading;div.appendChild(h);\n"
    "  var H=p.pp*ROW+20+p.pp*MEMH+20;\n"
    "  var svg=el('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H},div);\n"
    "  for(var s=0;s<p.pp;s++){el('text',{x:4,y:s*ROW+ROW/2,'class':'axis'},svg).textContent='stage '+s;}\n"
    "  p.ops.forEach(function(o){\n"
    "    var c=o.op===2?'#7bc96f':(o.op===0?FWD:BWD)[o.chunk%4];\n"
    "    var r=el('rect',{x:x(o.t0),y:o.stage*ROW+3,width:Math.max(0.5,x(o.t1)-x(o.t0)),height:ROW-6,"
    "fill:c,'class':'op','data-panel':pi,'data-stage':o.stage,'data-mb':o.id,'data-op':OPN[o.op]},svg);\n"
    "    rects.push({r:r,o:o});ends.push(o.t1);\n"
    "    var w=x(o.t1)-x(o.t0),full=o.id+': '+o.mbs+'\\u00d7'+o.len,lab=w>full.length*6.2?full:(w>String(o.id).length*7?String(o.id):'');\n"
    "    if(lab)el('text',{x:(x(o.t0)+x(o.t1))/2,y:o.stage*ROW+ROW/2,'class':'lbl'},svg).textContent=lab;\n"
    "    r.addEventListener('mousemove',function(ev){var m=memAt(p,o.stage,o.t1);\n"
    "      tip.textContent=p.schedule+', stage '+o.stage+'\\n'+OPN[o.op]+(p.chunks>1?' (chunk '+o.chunk+')':'')+\n"
    "        ' of micro-batch '+o.id+'\\nsize '+o.mbs+' \\u00d7 '+o.len+' tokens ('+o.n+' samples)\\n'+\n"
    "        'start '+o.t0.toFixed(3)+' ms, end '+o.t1.toFixed(3)+' ms'+(m===null?'':'\\nstage memory '+m.toFixed(0)+' MB');\n"
    "      tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';tip.style.top=(ev.clientY+12)+'px';});\n"
    "    r.addEventListener('mouseleave',function(){tip.style.display='none';});\n"
    "  });\n"
    "  var y0=p.pp*ROW+20;\n"
    "  for(var s2=0;s2<p.pp;s2++){\n"
    "    var top=y0+s2*MEMH,pts=[],last=null;\n"
    "    el('text',{x:4,y:top+MEMH/2,'class':'axis'},svg).textContent='mem '+s2;\n"
    "    p.mem.forEach(function(m){if(m.stage!==s2)return;var yy=top+MEMH-4-(MEMH-8)*(m.mb-lo)/(hi-lo);\n"
    "      if(last!==null)pts.push(x(m.t)+','+last);pts.push(x(m.t)+','+yy);last=yy;});\n"
    "    if(pts.length)el('polyline',{points:pts.join(' '),fill:'none',stroke:'#555','stroke-width':1.5,'class':'mem'},svg);\n"
    "  }\n"
    "  el('text',{x:W-10,y:H-4,'class':'axis','text-anchor':'end'},svg).textContent=\n"
    "    'memory '+lo.toFixed(0)+' to '+hi.toFixed(0)+' MB per stage (model state + activations; one scale for every panel)';\n"
    "  cursors.push(el('line',{x1:x(0),x2:x(0),y1:0,y2:H,'class':'cursor'},svg));\n"
    "});\n"
    "ends=ends.filter(function(v,i,a){return a.indexOf(v)===i;}).sort(function(a,b){return a-b;});\n"
    "var now=tmax,timer=null,clock=document.getElementById('clock');\n"
    "function show(t){now=t;cursors.forEach(function(c){c.setAttribute('x1',x(t));c.setAttribute('x2',x(t));});\n"
    "  rects.forEach(function(q){q.r.classList.toggle('later',q.o.t0>=t);});\n"
    "  clock.textContent='t = '+t.toFixed(3)+' ms of '+tmax.toFixed(3);}\n"
    "document.getElementById('step').onclick=function(){var n=ends.find(function(v){return v>now+1e-9;});show(n===undefined?ends[0]||0:n);};\n"
    "document.getElementById('back').onclick=function(){var b=ends.filter(function(v){return v<now-1e-9;});show(b.length?b[b.length-1]:0);};\n"
    "document.getElementById('play').onclick=function(){if(timer){clearInterval(timer);timer=null;this.textContent='Play';return;}\n"
    "  if(now>=tmax)show(0);this.textContent='Pause';var btn=this;timer=setInterval(function(){var t=now+tmax/200;\n"
    "  if(t>=tmax){t=tmax;clearInterval(timer);timer=null;btn.textContent='Play';}show(t);},40);};\n"
    "document.getElementById('reset').onclick=function(){show(tmax);};\n"
    "show(tmax);\n"
    "var auto=/^#step(\\d+)$/.exec(location.hash);\n"
    "if(auto){show(0);for(var i=0;i<+auto[1];i++)document.getElementById('step').onclick();}\n"
    "document.body.setAttribute('data-now',now.toFixed(6));\n"
    "document.body.setAttribute('data-later',String(document.querySelectorAll('rect.op.later').length));\n"
    "document.body.setAttribute('data-ops',String(rects.length));\n"
    "})();\n"
    "</script>\n";

/* The panels as the page's JSON. */
static cJSON *panels_json(const panel *ps, int n, const char *title)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "title", title);
    cJSON *arr = cJSON_AddArrayToObject(o, "panels");
    for (int k = 0; k < n; k++) {
        const panel *p = &ps[k];
        cJSON *x = cJSON_CreateObject();
        char heading[256];
        panel_heading(p, heading, sizeof heading);
        cJSON_AddStringToObject(x, "schedule", p->schedule);
        cJSON_AddStringToObject(x, "heading", heading);
        cJSON_AddNumberToObject(x, "pp", p->pp);
        cJSON_AddNumberToObject(x, "chunks", p->chunks);
        cJSON *ops = cJSON_AddArrayToObject(x, "ops");
        for (size_t i = 0; i < p->n_ops; i++) {
            const panel_op *q = &p->ops[i];
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "stage", q->stage);
            cJSON_AddNumberToObject(e, "op", q->op == OP_F ? 0 : q->op == OP_B ? 1 : 2);
            cJSON_AddNumberToObject(e, "chunk", q->chunk);
            cJSON_AddNumberToObject(e, "id", q->id);
            cJSON_AddNumberToObject(e, "t0", q->t0_ms);
            cJSON_AddNumberToObject(e, "t1", q->t1_ms);
            cJSON_AddNumberToObject(e, "mbs", q->mbs);
            cJSON_AddNumberToObject(e, "len", q->enc_len + q->dec_len);
            cJSON_AddNumberToObject(e, "n", q->n_samples);
            cJSON_AddItemToArray(ops, e);
        }
        cJSON *mem = cJSON_AddArrayToObject(x, "mem");
        for (size_t i = 0; i < p->n_mem; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "stage", p->mem[i].stage);
            cJSON_AddNumberToObject(e, "t", p->mem[i].t_ms);
            cJSON_AddNumberToObject(e, "mb", p->mem[i].mb);
            cJSON_AddItemToArray(mem, e);
        }
        cJSON_AddItemToArray(arr, x);
    }
    return o;
}

/* Writes JSON text for a script element's data: every '<', '>' and '&' (which JSON holds only
 * inside strings) as its \u escape, so that no string can close the element ("</script") or put
 * the tokenizer in its escaped states ("<!--", "<script"), whatever a model's or a file's name
 * holds; JSON.parse reads the same strings. */
static void put_script_safe(FILE *fp, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '<') fputs("\\u003c", fp);
        else if (*c == '>') fputs("\\u003e", fp);
        else if (*c == '&') fputs("\\u0026", fp);
        else fputc(*c, fp);
    }
}

static void put_html_text(FILE *fp, const char *text)
{
    for (const char *c = text; *c; c++) {
        if (*c == '<') fputs("&lt;", fp);
        else if (*c == '>') fputs("&gt;", fp);
        else if (*c == '&') fputs("&amp;", fp);
        else fputc(*c, fp);
    }
}

dp_status html_write_panels(const panel *ps, int n, const char *title, const char *path, dp_err *err)
{
    cJSON *o = panels_json(ps, n, title);
    char *json = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!json) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    out_file f;
    dp_status st = out_open(&f, path, err);
    if (st != DP_OK) {
        free(json);
        return st;
    }
    fputs(PAGE_HEAD, f.fp);
    fputs("<h1 id=\"title\">", f.fp);
    put_html_text(f.fp, title);
    fputs("</h1>\n<div class=\"bar\"><button id=\"back\">Back</button><button id=\"step\">Step"
          "</button><button id=\"play\">Play</button><button id=\"reset\">All</button>"
          "<span id=\"clock\"></span><span>forwards blue, backwards orange (a shade per chunk), "
          "weight gradients green; boxes say micro-batch: samples &times; padded length</span>"
          "</div>\n<div id=\"panels\"></div><div id=\"tip\"></div>\n"
          "<script type=\"application/json\" id=\"dpsim-data\">",
          f.fp);
    put_script_safe(f.fp, json);
    fputs("</script>\n", f.fp);
    fputs(PAGE_SCRIPT, f.fp);
    fputs("</body></html>\n", f.fp);
    free(json);
    return out_commit(&f, err);
}
