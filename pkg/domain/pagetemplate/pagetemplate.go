// Package pagetemplate checks and renders a seller's waiting-room page: HTML
// with placeholders ({{.Position}}, {{.Logo}}…) that the room fills, checked
// once (at upload or start) so that nothing a seller or a record supplies
// can put a script on the page; the room's own script is the only one.
package pagetemplate

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"strings"
	"text/template/parse"

	"golang.org/x/net/html"
)

// MaxSize bounds a template's source (it travels in the item's record).
const MaxSize = 16 << 10

// Data is what a template's placeholders are filled with. The fields of
// type template.HTML are the live slots: elements the room's script keeps
// current (they may stand only where text may); the strings are plain
// values, escaped wherever they stand.
type Data struct {
	// Room is the room's machinery: its script, its configuration and the
	// live region that tells screen readers what changed. Required, once.
	Room template.HTML
	// Position is the reader's place in line; Total how many wait.
	Position, Total template.HTML
	// ETA is the estimated wait, formatted for the reader's language.
	ETA template.HTML
	// Status is the registration's state in words.
	Status template.HTML
	// Progress is a progress bar of the way through the line.
	Progress template.HTML
	// Countdown counts down to the draw of a scheduled sale.
	Countdown template.HTML
	// Notice is the operator's message to everyone waiting.
	Notice template.HTML
	// Message is the item's reject message and any error.
	Message template.HTML
	// Admission shows the admission and the continue link once admitted.
	Admission template.HTML

	// Lang is the language the page is in (a BCP 47 tag: <html lang>).
	Lang string
	// ItemName is the item's name.
	ItemName string
	// Logo is the install's logo URL (WR_WAITPAGE_LOGO_URL).
	Logo string
}

// slots are the Data fields that render as elements; values the plain ones.
var (
	slots  = []string{"Room", "Position", "Total", "ETA", "Status", "Progress", "Countdown", "Notice", "Message", "Admission"}
	values = []string{"Lang", "ItemName", "Logo"}
)

// Placeholders lists every placeholder a template may use.
func Placeholders() []string { return append(append([]string(nil), slots...), values...) }

// Problem is why a template was refused: a sentence naming the line and the
// construct, for the seller.
type Problem struct {
	Line   int // 1-based; 0: the whole template
	Reason string
}

func (p *Problem) Error() string {
	if p.Line > 0 {
		return fmt.Sprintf("line %d: %s", p.Line, p.Reason)
	}
	return p.Reason
}

func problem(line int, format string, a ...any) *Problem {
	return &Problem{Line: line, Reason: fmt.Sprintf(format, a...)}
}

// Template is a checked template, safe to execute with any Data.
type Template struct{ t *template.Template }

// Execute renders the page.
func (t *Template) Execute(w io.Writer, d Data) error {
	if err := t.t.Execute(w, d); err != nil {
		return fmt.Errorf("render page template: %w", err)
	}
	return nil
}

// forbidden are the elements a seller may not use: scripts and what embeds
// another document or moves the page's base.
var forbidden = map[string]string{
	"script": "the room's own script is the only one on the page", "iframe": "no embedded documents",
	"frame": "no embedded documents", "object": "no embedded objects", "embed": "no embedded objects",
	"base": "the page's base URL is the room's", "form": "the page takes no input of its own",
	// SVG animation can set an attribute (an href) to a script URL.
	"animate": "no SVG animation of attributes", "set": "no SVG animation of attributes",
	"animatemotion": "no SVG animation of attributes", "animatetransform": "no SVG animation of attributes",
}

// Check parses src and refuses, with a *Problem, what could run a script
// or put a live slot where the room's elements cannot stand:
//
//   - a template syntax error, or any action other than a bare placeholder
//     ({{.Position}}: no pipelines, functions, conditions or template calls);
//   - <script>, <iframe>, <object>, <embed>, <frame>, <base>, <form>, SVG's
//     <animate>, <set>, <animateMotion>, <animateTransform>; an
//     event-handler attribute (on…); a value holding javascript:,
//     vbscript: or a data: URL other than an image;
//   - a placeholder inside <style>, a style attribute, a comment, a tag or
//     attribute name, or (for a live slot) anywhere but text;
//   - {{.Room}} missing or used twice, or a live slot used twice.
func Check(src string) (*Template, error) {
	t, _, err := check(src)
	return t, err
}

// check is Check, returning the page rendered with markers too.
func check(src string) (*Template, string, error) {
	t, out, err := parseProbe(src)
	if err != nil {
		return nil, "", err
	}
	if err := checkHTML(out, src); err != nil {
		return nil, "", err
	}
	if err := checkTree(out, src); err != nil {
		return nil, "", err
	}
	return &Template{t: t}, out, nil
}

// checkTree checks the elements and attributes of the page as a browser
// builds it. The tokenizer of checkHTML reads <style>, <title>, <textarea>,
// <xmp>… as raw text wherever they stand, but inside <svg> or <math> they
// hold markup, and an <img onerror> there breaks out into the page.
func checkTree(out, src string) error {
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		return problem(0, "HTML: %v", err)
	}
	placed := map[string]int{} // checkAttr counts placeholders; checkHTML holds their rules
	var walk func(n *html.Node) error
	walk = func(n *html.Node) error {
		if n.Type == html.ElementNode {
			tag := strings.ToLower(n.Data)
			if why, bad := forbidden[tag]; bad {
				return problem(srcLine(src, "<"+tag), "<%s> is not allowed: %s", tag, why)
			}
			for _, a := range n.Attr {
				if err := checkAttr(src, tag, strings.ToLower(a.Key), a.Val, placed); err != nil {
					return err
				}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(doc)
}

// parseProbe parses src, allows bare placeholders only, and renders it with
// a marker per placeholder (so the HTML checks can find where each landed).
func parseProbe(src string) (*template.Template, string, error) {
	if len(src) > MaxSize {
		return nil, "", problem(0, "the template is %d bytes; at most %d", len(src), MaxSize)
	}
	t, err := template.New("page").Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, "", problem(0, "%s", strings.TrimPrefix(err.Error(), "template: "))
	}
	if err := checkActions(t.Tree.Root, src); err != nil {
		return nil, "", err
	}
	probe := Data{}
	set := func(name string) string { return "wrph" + name + "x" }
	probe.Room, probe.Position, probe.Total = template.HTML(set("Room")), template.HTML(set("Position")), template.HTML(set("Total"))
	probe.ETA, probe.Status, probe.Progress = template.HTML(set("ETA")), template.HTML(set("Status")), template.HTML(set("Progress"))
	probe.Countdown, probe.Notice, probe.Message = template.HTML(set("Countdown")), template.HTML(set("Notice")), template.HTML(set("Message"))
	probe.Admission = template.HTML(set("Admission"))
	probe.Lang, probe.ItemName, probe.Logo = set("Lang"), set("ItemName"), "https://logo.invalid/"+set("Logo")
	var out bytes.Buffer
	if err := t.Execute(&out, probe); err != nil {
		return nil, "", problem(0, "%s", strings.TrimPrefix(err.Error(), "template: "))
	}
	return t, out.String(), nil
}

// checkActions allows text and bare placeholders only.
func checkActions(n parse.Node, src string) error {
	line := func(pos parse.Pos) int { return 1 + strings.Count(src[:min(int(pos), len(src))], "\n") }
	switch n := n.(type) {
	case *parse.ListNode:
		for _, c := range n.Nodes {
			if err := checkActions(c, src); err != nil {
				return err
			}
		}
	case *parse.TextNode, *parse.CommentNode:
	case *parse.ActionNode:
		p := n.Pipe
		if len(p.Decl) == 0 && len(p.Cmds) == 1 && len(p.Cmds[0].Args) == 1 {
			if f, ok := p.Cmds[0].Args[0].(*parse.FieldNode); ok && len(f.Ident) == 1 {
				if known(f.Ident[0]) {
					return nil
				}
				return problem(line(n.Pos), "{{.%s}} is not a placeholder (known: %s)", f.Ident[0], strings.Join(Placeholders(), ", "))
			}
		}
		return problem(line(n.Pos), "%s: only placeholders such as {{.Position}} are allowed", n)
	default:
		return problem(line(n.Position()), "%s: only placeholders such as {{.Position}} are allowed, no conditions, loops or template calls", n)
	}
	return nil
}

func known(name string) bool {
	for _, p := range Placeholders() {
		if p == name {
			return true
		}
	}
	return false
}

func isSlot(name string) bool {
	for _, s := range slots {
		if s == name {
			return true
		}
	}
	return false
}

// markers names the placeholders whose marker s holds, once per time it
// holds it (case-blind: the tokenizer lower-cases tag and attribute names).
func markers(s string) []string {
	var found []string
	s = strings.ToLower(s)
	for _, p := range Placeholders() {
		for range strings.Count(s, strings.ToLower("wrph"+p+"x")) {
			found = append(found, p)
		}
	}
	return found
}

// srcLine finds the line of the first placeholder or construct of src that
// mentions what (best effort: the rendered page's lines are not src's).
func srcLine(src, what string) int {
	i := strings.Index(src, what)
	if low := strings.ToLower(src); i < 0 && len(low) == len(src) {
		i = strings.Index(low, strings.ToLower(what)) // <SCRIPT>, onClick=
	}
	if i < 0 {
		return 0
	}
	return 1 + strings.Count(src[:i], "\n")
}

func checkHTML(out, src string) error {
	z := html.NewTokenizer(strings.NewReader(out))
	seen := map[string]int{}
	var raw string // the raw-text element the tokenizer is inside (style, title, textarea)
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if errors.Is(z.Err(), io.EOF) {
				if seen["Room"] != 1 {
					return problem(0, "{{.Room}} must stand once in the page's body (it is the room's script); found %d", seen["Room"])
				}
				return nil
			}
			return problem(0, "HTML: %v", z.Err())
		case html.CommentToken, html.DoctypeToken:
			if m := markers(string(z.Text())); len(m) > 0 {
				return problem(srcLine(src, "{{.%s"+m[0]), "{{.%s}} inside a comment or doctype", m[0])
			}
		case html.TextToken:
			text := string(z.Text())
			for _, m := range markers(text) {
				l := srcLine(src, "."+m)
				switch raw {
				case "style":
					return problem(l, "{{.%s}} inside <style>: placeholders stand in text or attributes", m)
				case "title", "textarea":
					if isSlot(m) {
						return problem(l, "{{.%s}} inside <%s>: a live slot stands in the page's text", m, raw)
					}
				}
				seen[m]++
			}
			raw = ""
		case html.StartTagToken, html.SelfClosingTagToken, html.EndTagToken:
			raw = ""
			name, hasAttr := z.TagName()
			tag := string(name)
			if m := markers(tag); len(m) > 0 {
				return problem(srcLine(src, "."+m[0]), "{{.%s}} inside a tag name", m[0])
			}
			if why, bad := forbidden[tag]; bad && tt != html.EndTagToken {
				return problem(srcLine(src, "<"+tag), "<%s> is not allowed: %s", tag, why)
			}
			if tt == html.StartTagToken && (tag == "style" || tag == "title" || tag == "textarea") {
				raw = tag
			}
			for hasAttr {
				var k, v []byte
				k, v, hasAttr = z.TagAttr()
				if err := checkAttr(src, tag, string(k), string(v), seen); err != nil {
					return err
				}
			}
		}
		for _, s := range slots {
			if seen[s] > 1 {
				return problem(srcLine(src, "."+s), "{{.%s}} is used %d times: each live slot stands once", s, seen[s])
			}
		}
	}
}

// checkAttr checks one attribute key=val of a tag of the seller's page and
// counts the placeholders its value holds in seen.
func checkAttr(src, tag, key, val string, seen map[string]int) error {
	if m := markers(key); len(m) > 0 {
		return problem(srcLine(src, "."+m[0]), "{{.%s}} inside an attribute name", m[0])
	}
	if strings.HasPrefix(key, "on") {
		return problem(srcLine(src, key+"="), "<%s %s=…>: event-handler attributes are not allowed (the room's own script is the only one)", tag, key)
	}
	// Anywhere in the value (a list of values, a srcset), with the
	// blanks a browser drops from a URL removed.
	low := strings.ToLower(strings.Join(strings.Fields(val), ""))
	if strings.Contains(low, "javascript:") || strings.Contains(low, "vbscript:") ||
		(strings.Contains(low, "data:") && !strings.HasPrefix(low, "data:image/")) {
		return problem(srcLine(src, key+"="), "<%s %s=%q>: script and data URLs are not allowed", tag, key, val)
	}
	if key == "http-equiv" && strings.EqualFold(val, "refresh") {
		return problem(srcLine(src, "http-equiv"), "<meta http-equiv=refresh> is not allowed: the room decides when the page moves on")
	}
	for _, m := range markers(val) {
		l := srcLine(src, "."+m)
		switch {
		case isSlot(m):
			return problem(l, "{{.%s}} in the attribute %s of <%s>: a live slot stands in the page's text", m, key, tag)
		case key == "style" || key == "srcdoc":
			return problem(l, "{{.%s}} in the attribute %s of <%s>: not a safe place for a value", m, key, tag)
		}
		seen[m]++
	}
	return nil
}
