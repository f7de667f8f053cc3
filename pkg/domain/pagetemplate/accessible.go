package pagetemplate

import (
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/net/html"
)

// Languages are the languages the room speaks (its own strings, the
// reader's choice of page), the fallback first. A seller's template may be
// given for an item per each of them.
func Languages() []string { return []string{"en", "ko", "ja", "de", "es"} }

// IsLanguage reports whether lang is one of Languages.
func IsLanguage(lang string) bool {
	for _, l := range Languages() {
		if l == lang {
			return true
		}
	}
	return false
}

// Accept is the check of a template being set (the admin API, waitroomctl,
// the install's template at start): Check, then the accessibility rules a
// page can be held to from its markup alone (checkAccessible). lang is the
// language the template is written in ("": any, {{.Lang}} decides); a
// literal <html lang> must name it. Pages are rendered after Check alone, so
// a template stored before a rule was added keeps showing.
func Accept(src, lang string) (*Template, error) {
	t, out, err := check(src)
	if err != nil {
		return nil, err
	}
	if err := checkAccessible(out, src, lang); err != nil {
		return nil, err
	}
	return t, nil
}

// langTag is the shape of a BCP 47 tag (ko, de-AT, es-419, zh-Hant-TW).
var langTag = regexp.MustCompile(`^[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*$`)

// checkAccessible refuses what axe-core reports as a serious or critical
// violation and the markup alone shows (the room's own part, {{.Room}},
// brings the screen readers' live region and is required by Check):
//
//   - <html> without lang, or a lang that is not a language tag
//     (html-has-lang, html-lang-valid), or, for a template of one
//     language, a literal lang naming another;
//   - no <title>, or an empty one (document-title);
//   - an <img> or <area> without alt (image-alt, area-alt; alt="" marks a
//     decorative image);
//   - a viewport that forbids zooming: user-scalable=no, maximum-scale
//     below 2 (meta-viewport);
//   - a positive tabindex, which reorders the keyboard's way through the
//     page (tabindex).
func checkAccessible(out, src, lang string) error {
	z := html.NewTokenizer(strings.NewReader(out))
	seen := map[string]int{} // tags so far, to name the line of the n-th
	var (
		htmlLang, title       *string
		inTitle               bool
		titleText             strings.Builder
		titleLine, htmlLangAt int
	)
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				return problem(0, "HTML: %v", z.Err())
			}
			return finishAccessible(src, lang, htmlLang, htmlLangAt, title, titleText.String(), titleLine)
		case html.TextToken:
			if inTitle {
				titleText.Write(z.Text())
			}
		case html.EndTagToken:
			if name, _ := z.TagName(); string(name) == "title" {
				inTitle = false
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, more := z.TagName()
			tag := string(name)
			seen[tag]++
			line := nthLine(src, "<"+tag, seen[tag])
			attrs := map[string]string{}
			for more {
				var k, v []byte
				k, v, more = z.TagAttr()
				attrs[string(k)] = string(v)
			}
			if err := checkTag(tag, attrs, line); err != nil {
				return err
			}
			switch {
			case tag == "html" && htmlLang == nil:
				if l, ok := attrs["lang"]; ok {
					htmlLang, htmlLangAt = &l, line
				}
			case tag == "title" && title == nil:
				empty := ""
				title, titleLine, inTitle = &empty, line, tt == html.StartTagToken
			}
		}
	}
}

// checkTag applies the rules of one element of the page.
func checkTag(tag string, attrs map[string]string, line int) error {
	if _, ok := attrs["alt"]; !ok && (tag == "img" || tag == "area") {
		return problem(line, `<%s> without alt: give it a text alternative (alt="" for a decorative image)`, tag)
	}
	if ti, ok := attrs["tabindex"]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(ti)); err == nil && n > 0 {
			return problem(line, `<%s tabindex="%d">: a positive tabindex breaks the keyboard's order; use 0 or -1`, tag, n)
		}
	}
	if tag == "meta" && strings.EqualFold(attrs["name"], "viewport") {
		for _, kv := range strings.FieldsFunc(strings.ToLower(attrs["content"]), func(r rune) bool { return r == ',' || r == ';' }) {
			k, v, _ := strings.Cut(kv, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if k == "user-scalable" && (v == "no" || v == "0") {
				return problem(line, "<meta name=viewport> with user-scalable=%s: readers must be able to zoom", v)
			}
			if f, err := strconv.ParseFloat(v, 64); k == "maximum-scale" && err == nil && f < 2 {
				return problem(line, "<meta name=viewport> with maximum-scale=%s: readers must be able to zoom to 200%% at least", v)
			}
		}
	}
	return nil
}

func finishAccessible(src, lang string, htmlLang *string, langLine int, title *string, titleText string, titleLine int) error {
	switch {
	case htmlLang == nil:
		return problem(srcLine(src, "<html"), `the page has no <html lang>: write <html lang="{{.Lang}}"> (screen readers pick their voice by it)`)
	case *htmlLang == "wrphLangx":
	case !langTag.MatchString(*htmlLang):
		return problem(langLine, `<html lang=%q> is not a language tag: write <html lang="{{.Lang}}">`, *htmlLang)
	case lang != "" && !strings.EqualFold(strings.SplitN(*htmlLang, "-", 2)[0], lang):
		return problem(langLine, `<html lang=%q> in the template for %q: write <html lang="{{.Lang}}"> or lang=%q`, *htmlLang, lang, lang)
	}
	if title == nil || strings.TrimSpace(titleText) == "" {
		return problem(titleLine, "the page has no title: write <title>{{.ItemName}} – your shop</title> (it names the tab and is read first)")
	}
	return nil
}

// nthLine is the line of src's n-th tag opened as what ("<img", case
// blind), 0 when there is none: the page rendered with markers has src's
// markup.
func nthLine(src, what string, n int) int {
	low, what := strings.ToLower(src), strings.ToLower(what)
	if len(low) != len(src) {
		return 0
	}
	at := 0
	for n > 0 {
		i := strings.Index(low[at:], what)
		if i < 0 {
			return 0
		}
		at += i + len(what)
		if at == len(low) || !isNameByte(low[at]) { // <a, not <abbr
			n--
		}
	}
	return 1 + strings.Count(src[:at], "\n")
}

func isNameByte(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '-' }
