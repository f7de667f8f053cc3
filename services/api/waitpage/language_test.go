package waitpage

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCatalogMatchesTheReadersLanguage(t *testing.T) {
	c, err := LoadCatalog()
	require.NoError(t, err)
	for _, tc := range []struct {
		prefs []string
		want  string
	}{
		{[]string{"ko-KR,ko;q=0.9,en-US;q=0.8"}, "ko"},
		{[]string{"ja"}, "ja"},
		{[]string{"de-AT,de;q=0.9"}, "de"},
		{[]string{"es-419"}, "es"},
		{[]string{"fr-FR,fr;q=0.9"}, "en"},          // not spoken: English
		{[]string{"fr-FR,fr;q=0.9,ja;q=0.5"}, "ja"}, // the best spoken one of the list
		{[]string{""}, "en"},
		{[]string{"!!bad header"}, "en"},
		{[]string{"de", "ko"}, "de"}, // an override first
		{[]string{"", "ko"}, "ko"},   // no override: the header
	} {
		assert.Equal(t, tc.want, c.Match(tc.prefs...), "%q", tc.prefs)
	}
	for _, l := range c.Languages() {
		assert.NotEmpty(t, c.Messages(l)["status.WAITING"], l)
	}
}

// Every string the page and its slots ask the catalogue for is in it (a
// missing one would show its key to the reader), and every status
// waitroom.js can report has words.
func TestEveryKeyThePageUsesIsInTheCatalogue(t *testing.T) {
	c, err := LoadCatalog()
	require.NoError(t, err)
	en := c.Messages("en")
	var keys []string
	for _, m := range regexp.MustCompile(`index (?:\.T|\.) "([^"]+)"`).FindAllStringSubmatch(pageSrc+slotsSrc, -1) {
		keys = append(keys, m[1])
	}
	for _, m := range regexp.MustCompile(`\bt\("([^"]+)"\s*[,)]`).FindAllStringSubmatch(pageScript, -1) {
		keys = append(keys, m[1])
	}
	require.Greater(t, len(keys), 15, "the scan found the page's keys")
	for _, k := range keys {
		_, ok := en[k]
		assert.True(t, ok, "the page asks for %q", k)
	}
	statuses := regexp.MustCompile(`"([A-Z_]+)"\]`).FindAllStringSubmatch(string(script), -1)
	require.Greater(t, len(statuses), 8, "the scan found waitroom.js's statuses")
	for _, m := range statuses {
		_, ok := en["status."+m[1]]
		assert.True(t, ok, "waitroom.js reports %s", m[1])
	}
}
