// Package docs holds the machine-readable contracts of waitroom: the OpenAPI
// description of the HTTP services and the JSON Schemas of the topics'
// records, embedded so that every module's tests hold the code to them.
package docs

import (
	"context"
	"embed"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"

	"github.com/getkin/kin-openapi/openapi3"
)

// Files holds openapi.yaml and schemas/*.json.
//
//go:embed openapi.yaml schemas/*.json
var Files embed.FS

// Schema files of the topics' records, by topic.
const (
	RegistrationSchema = "schemas/registration.json"
	ItemSchema         = "schemas/item.json"
	AdmissionSchema    = "schemas/admission.json"
	BlockSchema        = "schemas/block.json"
)

// OpenAPI loads openapi.yaml and checks it is a valid OpenAPI document.
func OpenAPI(ctx context.Context) (*openapi3.T, error) {
	b, err := Files.ReadFile("openapi.yaml")
	if err != nil {
		return nil, fmt.Errorf("read openapi.yaml: %w", err)
	}
	doc, err := openapi3.NewLoader().LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("validate openapi.yaml: %w", err)
	}
	return doc, nil
}

// Routes returns "METHOD /path/{param}" of every operation of doc that
// service serves (its x-services lists it), sorted.
func Routes(doc *openapi3.T, service string) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if slices.Contains(services(op), service) {
				out = append(out, method+" "+path)
			}
		}
	}
	sort.Strings(out)
	return out
}

func services(op *openapi3.Operation) []string {
	raw, _ := op.Extensions["x-services"].([]any)
	var out []string
	for _, s := range raw {
		if s, ok := s.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// GinRoute writes a gin route ("/items/:itemId") the way the spec does
// ("/items/{itemId}"), with its method: "GET /items/{itemId}".
func GinRoute(method, path string) string {
	return method + " " + ginParam.ReplaceAllString(path, "{$1}")
}

// ServerURL points doc's servers at base (a test's listener), so a router
// of kin-openapi finds the operations of requests sent there.
func ServerURL(doc *openapi3.T, base string) error {
	if _, err := url.Parse(base); err != nil {
		return fmt.Errorf("server url %q: %w", base, err)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	return nil
}
