package waitpage

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/waitroom/waitroom/pkg/domain/pagetemplate"
)

// Config is the install's waiting page: its own template (else the room's
// default page), its logo and its colours.
type Config struct {
	// Template is a file holding the install's page: HTML with placeholders
	// (pkg/domain/pagetemplate, docs/waiting-page.md), checked at start. An item's
	// own template (its field template) wins over it.
	Template string `env:"WR_WAITPAGE_TEMPLATE"`
	// LogoURL fills {{.Logo}} (an https: or a path URL).
	LogoURL string `env:"WR_WAITPAGE_LOGO_URL"`
	// Colors are the brand colours, name=#hex pairs of accent, text,
	// background and surface, set on the page as --wr-<name>.
	Colors string `env:"WR_WAITPAGE_COLORS"`
}

// defaultColors are the default page's; WR_WAITPAGE_COLORS overrides each.
// Every pair of text on its background has a contrast of at least 4.5:1.
var defaultColors = [][2]string{{"accent", "#2b4bc4"}, {"text", "#1d2433"}, {"background", "#f4f6fb"}, {"surface", "#ffffff"}}

var hexColor = regexp.MustCompile(`^#([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)

// colors parses WR_WAITPAGE_COLORS over the defaults.
func (c Config) colors() ([][2]string, error) {
	out := append([][2]string(nil), defaultColors...)
	if strings.TrimSpace(c.Colors) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(c.Colors, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || !hexColor.MatchString(v) {
			return nil, fmt.Errorf("WR_WAITPAGE_COLORS: %q is not name=#hex", kv)
		}
		found := false
		for i := range out {
			if out[i][0] == k {
				out[i][1], found = v, true
			}
		}
		if !found {
			return nil, fmt.Errorf("WR_WAITPAGE_COLORS: %q is not one of accent, text, background, surface", k)
		}
	}
	return out, nil
}

// install reads and checks the install's template (nil: none), as an
// upload is checked (pagetemplate.Accept).
func (c Config) install() (*pagetemplate.Template, error) {
	if c.Template == "" {
		return nil, nil
	}
	b, err := os.ReadFile(c.Template)
	if err != nil {
		return nil, fmt.Errorf("WR_WAITPAGE_TEMPLATE: %w", err)
	}
	t, err := pagetemplate.Accept(string(b), "")
	if err != nil {
		return nil, fmt.Errorf("WR_WAITPAGE_TEMPLATE %s: %w", c.Template, err)
	}
	return t, nil
}

// Validate checks the template file, the logo and the colours.
func (c Config) Validate() error {
	if _, err := c.colors(); err != nil {
		return err
	}
	if c.LogoURL != "" && !(strings.HasPrefix(c.LogoURL, "https://") || strings.HasPrefix(c.LogoURL, "/")) {
		return fmt.Errorf("WR_WAITPAGE_LOGO_URL %q: an https: URL or a path", c.LogoURL)
	}
	_, err := c.install()
	return err
}
