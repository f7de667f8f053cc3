package waitpage

import (
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
