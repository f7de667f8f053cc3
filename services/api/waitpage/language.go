package waitpage

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/pkg/domain/pagetemplate"
	"golang.org/x/text/language"
)

// LangParam overrides the browser's Accept-Language (?lang=ko); the choice
// is kept in LangCookie, so the page keeps the reader's language on reload.
const (
	LangParam  = "lang"
	LangCookie = "wr_lang"
)

//go:embed locales/*.json
var localeFS embed.FS

// Catalog is the room's own strings in every language it speaks: a message
// catalogue per language (locales/<tag>.json, embedded), English first (the
// fallback).
type Catalog struct {
	tags    []language.Tag
	msgs    map[string]map[string]string // by tag string
	matcher language.Matcher
}

// languages is the order tags are offered in; the first is the fallback.
var languages = pagetemplate.Languages()

// LoadCatalog reads the embedded catalogues; every one must have exactly the
// English keys (a missing string would show a key to a reader).
func LoadCatalog() (*Catalog, error) {
	c := &Catalog{msgs: map[string]map[string]string{}}
	for _, l := range languages {
		b, err := localeFS.ReadFile(path.Join("locales", l+".json"))
		if err != nil {
			return nil, fmt.Errorf("read catalogue %s: %w", l, err)
		}
		m := map[string]string{}
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("parse catalogue %s: %w", l, err)
		}
		c.msgs[l] = m
		c.tags = append(c.tags, language.MustParse(l))
	}
	en := c.msgs[languages[0]]
	for _, l := range languages[1:] {
		for k := range en {
			if _, ok := c.msgs[l][k]; !ok {
				return nil, fmt.Errorf("catalogue %s: no %q", l, k)
			}
		}
		for k := range c.msgs[l] {
			if _, ok := en[k]; !ok {
				return nil, fmt.Errorf("catalogue %s: %q is not an English key", l, k)
			}
		}
	}
	c.matcher = language.NewMatcher(c.tags)
	return c, nil
}

// Languages are the tags the room speaks, the fallback first.
func (c *Catalog) Languages() []string { return append([]string(nil), languages...) }

// Messages are the strings of lang (one of Languages).
func (c *Catalog) Messages(lang string) map[string]string { return c.msgs[lang] }

// Match picks the best language the room speaks for the given preferences,
// each an Accept-Language value or a tag; the first that names a language
// the room speaks (even as a region of it: de-AT, es-419) wins over the
// later ones, and English is the answer when none does.
func (c *Catalog) Match(prefs ...string) string {
	for _, p := range prefs {
		if p == "" {
			continue
		}
		tags, _, err := language.ParseAcceptLanguage(p)
		if err != nil || len(tags) == 0 {
			continue
		}
		_, i, conf := c.matcher.Match(tags...)
		if conf > language.No {
			return languages[i]
		}
	}
	return languages[0]
}

// choose picks the reader's language: ?lang= (kept in a cookie for the
// next page), then the cookie, then Accept-Language.
func (c *Catalog) choose(g *gin.Context) string {
	if q := strings.TrimSpace(g.Query(LangParam)); q != "" {
		lang := c.Match(q)
		http.SetCookie(g.Writer, &http.Cookie{Name: LangCookie, Value: lang, Path: "/", MaxAge: 365 * 86400,
			SameSite: http.SameSiteLaxMode, HttpOnly: true})
		return lang
	}
	ck, _ := g.Cookie(LangCookie)
	return c.Match(ck, g.GetHeader("Accept-Language"))
}
