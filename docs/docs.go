// Package docs holds the machine-readable contracts of waitroom: the OpenAPI
// description of the HTTP services and the JSON Schemas of the topics'
// records, embedded so that every module's tests hold the code to them.
package docs

import (
	"bytes"
	"context"
	"embed"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/gin-gonic/gin"
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

// CheckRoutes compares the routes a service's gin engine serves
// (engine.Routes()) with the spec's routes of service, both ways: the error
// names every route only one side has.
func CheckRoutes(ctx context.Context, service string, served gin.RoutesInfo) error {
	doc, err := OpenAPI(ctx)
	if err != nil {
		return err
	}
	spec := map[string]bool{}
	for _, r := range Routes(doc, service) {
		spec[r] = true
	}
	var extra, missing []string
	for _, r := range served {
		route := r.Method + " " + ginParam.ReplaceAllString(r.Path, "{$1}")
		if !spec[route] {
			extra = append(extra, route)
		}
		delete(spec, route)
	}
	for r := range spec {
		missing = append(missing, r)
	}
	sort.Strings(missing)
	if len(extra) > 0 || len(missing) > 0 {
		return fmt.Errorf("%s serves routes openapi.yaml does not list for it: %v; openapi.yaml lists routes it does not serve: %v", service, extra, missing)
	}
	return nil
}

// Contract checks real HTTP exchanges with a service against the spec:
// the request (unless a case sends a malformed one on purpose) and the
// answer, whose status must be one the operation lists, with its headers and
// its JSON body's schema (error codes included). It remembers the operations
// it saw, for Unexercised.
type Contract struct {
	doc    *openapi3.T
	router routers.Router
	mu     sync.Mutex
	seen   map[string]bool // operationIds
}

// NewContract loads the spec for exchanges with the server at base
// ("http://127.0.0.1:port").
func NewContract(ctx context.Context, base string) (*Contract, error) {
	doc, err := OpenAPI(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := url.Parse(base); err != nil {
		return nil, fmt.Errorf("server url %q: %w", base, err)
	}
	doc.Servers = openapi3.Servers{{URL: base}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route openapi.yaml: %w", err)
	}
	return &Contract{doc: doc, router: router, seen: map[string]bool{}}, nil
}

// Check validates one exchange: req was sent with reqBody and answered
// status with header and body. malformed skips the request's validation.
// Bodies other than JSON (pages, scripts, metrics) are not read: the spec
// says only that they are text.
func (c *Contract) Check(ctx context.Context, req *http.Request, reqBody []byte, malformed bool, status int, header http.Header, body []byte) error {
	req = req.Clone(ctx)
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: no operation of the spec: %w", req.Method, req.URL.Path, err)
	}
	c.mu.Lock()
	c.seen[route.Operation.OperationID] = true
	c.mu.Unlock()
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if !malformed {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("%s %s: the request breaks the spec: %w", req.Method, req.URL.Path, err)
		}
	}
	mt, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, ExcludeResponseBody: mt != "application/json"}}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s %s answered %d %s, not as the spec says: %w", req.Method, req.URL.Path, status, body, err)
	}
	return nil
}

// Unexercised returns the routes of service no checked exchange used.
func (c *Contract) Unexercised(service string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range Routes(c.doc, service) {
		method, path, _ := strings.Cut(r, " ")
		if !c.seen[c.doc.Paths.Find(path).GetOperation(method).OperationID] {
			out = append(out, r)
		}
	}
	return out
}
