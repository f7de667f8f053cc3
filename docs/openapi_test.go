package docs_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/docs"
)

// TestOpenAPIIsValid loads the spec as the service tests do and checks the
// rules its readers rely on: every operation names the services serving it,
// every error answer is the one error shape with its codes listed.
func TestOpenAPIIsValid(t *testing.T) {
	doc, err := docs.OpenAPI(context.Background())
	require.NoError(t, err)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	known := map[string]bool{"api": true, "notifier": true, "scheduler": true}
	code := regexp.MustCompile(`^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$`)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			svcs, _ := op.Extensions["x-services"].([]any)
			require.NotEmpty(t, svcs, "%s: no x-services", where)
			for _, s := range svcs {
				require.True(t, known[s.(string)], "%s: unknown service %v", where, s)
			}
			require.NotEmpty(t, op.OperationID, where)
			require.NotNil(t, op.Responses.Value("500"), "%s: no 500 INTERNAL", where)
			for status, r := range op.Responses.Map() {
				if status[0] != '4' && status[0] != '5' {
					continue
				}
				codes := errorCodes(r.Value)
				require.NotEmpty(t, codes, "%s %s: no error codes listed", where, status)
				for _, c := range codes {
					require.Regexp(t, code, c, "%s %s", where, status)
				}
			}
		}
	}
	// Every service has routes in the spec.
	for s := range known {
		require.NotEmpty(t, docs.Routes(doc, s), s)
	}
}

// errorCodes collects the codes an error response lists: the enum (or const)
// of error.code in each schema the answer may have.
func errorCodes(r *openapi3.Response) []string {
	var out []string
	for _, mt := range r.Content {
		out = append(out, schemaCodes(mt.Schema.Value)...)
	}
	return out
}

func schemaCodes(s *openapi3.Schema) []string {
	var out []string
	for _, sub := range append(append(openapi3.SchemaRefs{}, s.AllOf...), s.OneOf...) {
		out = append(out, schemaCodes(sub.Value)...)
	}
	if e := s.Properties["error"]; e != nil {
		if c := e.Value.Properties["code"]; c != nil {
			for _, v := range c.Value.Enum {
				out = append(out, v.(string))
			}
			if v, ok := c.Value.Const.(string); ok {
				out = append(out, v)
			}
		}
	}
	return out
}
