package web

import (
	"bytes"
	"embed"
	"html/template"
	"io"
	"strconv"
	"strings"
	"time"
)

//go:embed assets/page.html assets/style.css assets/app.js
var assets embed.FS

// parts are the page's parts that updates replace, by element id, each
// drawn by the template of the same name.
var parts = []string{"progress", "timeline", "hosts", "queue", "finished"}

var tmpl = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"unixMilli": func(t time.Time) int64 { return t.UnixMilli() },
	"num":       func(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) },
	"jobAt":     func(p *page, j *jobInfo) jobView { return jobView{Page: p, Job: j, Back: "/"} },
	"head":      func(title, base string) headView { return headView{Title: title, Base: base} },
}).ParseFS(assets, "assets/page.html"))

// headView is what a page's <head> needs: its title and where its
// files are.
type headView struct{ Title, Base string }

// jobView is a job as a part of a page draws it; Back is where its forms
// return to.
type jobView struct {
	Page *page
	Job  *jobInfo
	Back string
}

// jobPage is a job's own page: the job and the tails of its logs.
type jobPage struct {
	jobView
	Out, Err tail
}

// render draws the template name for data.
func render(w io.Writer, name string, data any) error {
	return tmpl.ExecuteTemplate(w, name, data)
}

// renderParts draws each part of p, the timeline only when timeline is set.
func renderParts(p *page, timeline bool) (map[string]string, error) {
	out := make(map[string]string, len(parts))
	var b bytes.Buffer
	for _, name := range parts {
		if name == "timeline" && !timeline {
			continue
		}
		b.Reset()
		if err := render(&b, name, p); err != nil {
			return nil, err
		}
		out[name] = squeeze(b.String())
	}
	return out, nil
}

// squeeze drops the blank lines the templates leave: every update costs
// fewer bytes. The parts hold no <pre>, where lines would matter.
func squeeze(html string) string {
	var b strings.Builder
	for line := range strings.Lines(html) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(line)
		}
	}
	return b.String()
}
