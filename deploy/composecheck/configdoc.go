package composecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/waitroom/waitroom/pkg/foundation/config"
)

// Setting is one environment variable as the code reads it: its default per
// program (empty when it has none) and the programs that read it.
type Setting struct {
	Key      string
	Defaults map[string]string // program -> envDefault ("" when none)
	UsedBy   []string          // in DocPrograms' order
}

// DocProgram is a program whose Config docs/configuration.md documents.
type DocProgram struct {
	Name string
	// Config is the value the program loads from the environment, or nil
	// when it lives in a main package (not importable): then File names the
	// Go file, relative to the repo root, that declares `type Config struct`.
	Config any
	File   string
}

// DocPrograms are the programs whose settings docs/configuration.md lists,
// in the order its "used by" column names them.
var DocPrograms = []DocProgram{
	{Name: "api", Config: Binaries["waitroom-api"]},
	{Name: "consumer", Config: Binaries["waitroom-consumer"]},
	{Name: "scheduler", Config: Binaries["waitroom-scheduler"]},
	{Name: "notifier", Config: Binaries["waitroom-notifier"]},
	{Name: "ctl", Config: Binaries["waitroomctl"]},
	{Name: "dev", File: "services/dev/main.go"},
	{Name: "waitroom-kafka", File: "services/dev/cmd/waitroom-kafka/main.go"},
	{Name: "cluster", File: "services/dev/cmd/waitroom-cluster/main.go"},
	{Name: "chaos", File: "services/dev/cmd/waitroom-chaos/main.go"},
}

// servers are the programs "all" stands for in the used-by column.
var servers = []string{"api", "consumer", "scheduler", "notifier"}

// Settings reads every program's settings from its config type (through the
// env library's own reading of the tags) and merges them by variable.
func Settings(root string) (map[string]*Setting, error) {
	out := map[string]*Setting{}
	for _, p := range DocPrograms {
		t := reflect.TypeOf(p.Config)
		if p.Config == nil {
			var err error
			if t, err = mainConfigType(root + "/" + p.File); err != nil {
				return nil, fmt.Errorf("config of %s: %w", p.Name, err)
			}
		}
		params, err := env.GetFieldParams(reflect.New(t).Interface())
		if err != nil {
			return nil, fmt.Errorf("env fields of %s: %w", p.Name, err)
		}
		for _, f := range params {
			s := out[f.Key]
			if s == nil {
				s = &Setting{Key: f.Key, Defaults: map[string]string{}}
				out[f.Key] = s
			}
			if _, seen := s.Defaults[p.Name]; !seen {
				s.UsedBy = append(s.UsedBy, p.Name)
			}
			s.Defaults[p.Name] = f.DefaultValue
		}
	}
	return out, nil
}

// nestedTypes are the shared config blocks a main package's Config embeds by
// name (a field without an env tag, typed config.X).
var nestedTypes = map[string]reflect.Type{
	"config.Log": reflect.TypeFor[config.Log](), "config.Kafka": reflect.TypeFor[config.Kafka](),
	"config.Redis": reflect.TypeFor[config.Redis](), "config.HTTP": reflect.TypeFor[config.HTTP](),
}

var basicTypes = map[string]reflect.Type{
	"string": reflect.TypeFor[string](), "int": reflect.TypeFor[int](), "int32": reflect.TypeFor[int32](),
	"int64": reflect.TypeFor[int64](), "bool": reflect.TypeFor[bool](), "float64": reflect.TypeFor[float64](),
	"time.Duration": reflect.TypeFor[time.Duration](), "[]int": reflect.TypeFor[[]int](),
	"[]string": reflect.TypeFor[[]string](),
}

// mainConfigType rebuilds a main package's `type Config struct` as a
// reflect type with the same fields and tags, so the env library reads it
// as it reads the program's own.
func mainConfigType(file string) (reflect.Type, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", file, err)
	}
	var st *ast.StructType
	ast.Inspect(f, func(n ast.Node) bool {
		if ts, ok := n.(*ast.TypeSpec); ok && ts.Name.Name == "Config" {
			st, _ = ts.Type.(*ast.StructType)
		}
		return st == nil
	})
	if st == nil {
		return nil, fmt.Errorf("%s declares no `type Config struct`", file)
	}
	var fields []reflect.StructField
	for _, fl := range st.Fields.List {
		typ := exprString(fl.Type)
		var tag reflect.StructTag
		if fl.Tag != nil {
			s, err := strconv.Unquote(fl.Tag.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: tag %s: %w", file, fl.Tag.Value, err)
			}
			tag = reflect.StructTag(s)
		}
		rt := basicTypes[typ]
		if rt == nil {
			rt = nestedTypes[typ]
		}
		if rt == nil {
			return nil, fmt.Errorf("%s: field type %s is not known to configdoc.go (add it to basicTypes or nestedTypes)", file, typ)
		}
		for _, name := range fl.Names {
			fields = append(fields, reflect.StructField{Name: name.Name, Type: rt, Tag: tag})
		}
	}
	return reflect.StructOf(fields), nil
}

func exprString(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return exprString(e.X) + "." + e.Sel.Name
	case *ast.ArrayType:
		return "[]" + exprString(e.Elt)
	}
	return fmt.Sprintf("%T", e)
}

// The table in docs/configuration.md sits between these two lines.
const (
	tableBegin = "<!-- settings: generated from the config structs by `go test ./deploy/composecheck -run TestConfigDocIsCurrent -update`; write only the meaning column (and a note after a default) by hand -->"
	tableEnd   = "<!-- end of settings -->"
	tableHead  = "| variable | default | used by | meaning |\n|---|---|---|---|"
)

// Row is one row of the table: one or more variables documented together.
type Row struct {
	Keys    []string
	Note    string // after the generated defaults, kept as written
	Meaning string
}

var (
	rowRe     = regexp.MustCompile("^\\| (`WR_[A-Z0-9_]+`(?:, `WR_[A-Z0-9_]+`)*) \\| (.*?) \\| (.*?) \\| (.*) \\|$")
	defaultRe = func() *regexp.Regexp {
		var names []string
		for _, p := range DocPrograms {
			names = append(names, regexp.QuoteMeta(p.Name))
		}
		prog := "(?:" + strings.Join(names, "|") + ")"
		// What DefaultCell writes: `d` or —, each maybe with its programs, joined by "; " or ", ".
		return regexp.MustCompile("^(?:`[^`]*`|—)(?: \\(" + prog + "(?:, " + prog + ")*\\))?(?:(?:; |, )(?:`[^`]*`|—)(?: \\(" + prog + "(?:, " + prog + ")*\\))?)*")
	}()
)

// ParseTable reads the rows of the settings table in doc.
func ParseTable(doc string) (before string, rows []Row, after string, err error) {
	b, rest, ok := strings.Cut(doc, tableBegin+"\n")
	if !ok {
		return "", nil, "", fmt.Errorf("no line %q", tableBegin)
	}
	table, a, ok := strings.Cut(rest, tableEnd)
	if !ok {
		return "", nil, "", fmt.Errorf("no line %q", tableEnd)
	}
	for _, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if strings.HasPrefix(line, "| variable ") || strings.HasPrefix(line, "|---") {
			continue
		}
		m := rowRe.FindStringSubmatch(line)
		if m == nil {
			return "", nil, "", fmt.Errorf("not a settings row: %s", line)
		}
		var keys []string
		for _, k := range strings.Split(m[1], ", ") {
			keys = append(keys, strings.Trim(k, "`"))
		}
		note := strings.TrimSpace(defaultRe.ReplaceAllString(m[2], ""))
		rows = append(rows, Row{Keys: keys, Note: note, Meaning: m[4]})
	}
	return b, rows, a, nil
}

// DefaultCell renders a variable's default: its envDefault, or — without
// one; when programs differ, the most common one bare and the others each
// with its programs.
func (s *Setting) DefaultCell() string {
	cell := func(d string) string {
		if d == "" {
			return "—"
		}
		return "`" + d + "`"
	}
	first := s.Defaults[s.UsedBy[0]]
	same := true
	for _, p := range s.UsedBy {
		same = same && s.Defaults[p] == first
	}
	if same {
		return cell(first)
	}
	// Group the programs by default, in used-by order.
	var order []string
	by := map[string][]string{}
	for _, p := range s.UsedBy {
		d := s.Defaults[p]
		if _, ok := by[d]; !ok {
			order = append(order, d)
		}
		by[d] = append(by[d], p)
	}
	// The default of most programs first and bare, the others with theirs.
	slices.SortStableFunc(order, func(a, b string) int { return len(by[b]) - len(by[a]) })
	parts := []string{cell(order[0])}
	for _, d := range order[1:] {
		parts = append(parts, cell(d)+" ("+strings.Join(by[d], ", ")+")")
	}
	return strings.Join(parts, "; ")
}

func usedByCell(used []string) string {
	var out []string
	all := true
	for _, s := range servers {
		all = all && slices.Contains(used, s)
	}
	if all {
		out = append(out, "all")
	}
	for _, p := range used {
		if !all || !slices.Contains(servers, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, ", ")
}

// RenderTable renders rows against the settings the code reads. It fails
// when a variable the code reads has no row (write one, with its meaning) or
// a row names a variable no program reads any more.
func RenderTable(rows []Row, settings map[string]*Setting) (string, error) {
	var b strings.Builder
	b.WriteString(tableBegin + "\n" + tableHead + "\n")
	documented := map[string]bool{}
	var problems []string
	for _, r := range rows {
		var keys, defaults []string
		var used []string
		for _, k := range r.Keys {
			s := settings[k]
			if s == nil {
				problems = append(problems, "the row of "+k+" names a variable no config reads: remove it")
				continue
			}
			if documented[k] {
				problems = append(problems, k+" has two rows")
			}
			documented[k] = true
			keys = append(keys, "`"+k+"`")
			defaults = append(defaults, s.DefaultCell())
			for _, p := range s.UsedBy {
				if !slices.Contains(used, p) {
					used = append(used, p)
				}
			}
		}
		if len(keys) == 0 {
			continue
		}
		if strings.TrimSpace(r.Meaning) == "" {
			problems = append(problems, strings.Join(r.Keys, ", ")+" has no meaning")
		}
		slices.SortFunc(used, func(a, b string) int { return programIndex(a) - programIndex(b) })
		def := strings.Join(defaults, ", ")
		if r.Note != "" {
			def += " " + r.Note
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", strings.Join(keys, ", "), def, usedByCell(used), r.Meaning)
	}
	var missing []string
	for k := range settings {
		if !documented[k] {
			missing = append(missing, k)
		}
	}
	slices.Sort(missing)
	for _, k := range missing {
		problems = append(problems, fmt.Sprintf("%s (read by %s) has no row: add `| `%s` | | | <what it means> |` to the table and run -update", k, strings.Join(settings[k].UsedBy, ", "), k))
	}
	b.WriteString(tableEnd)
	if len(problems) > 0 {
		return "", fmt.Errorf("docs/configuration.md's settings table:\n  %s", strings.Join(problems, "\n  "))
	}
	return b.String(), nil
}

func programIndex(name string) int {
	return slices.IndexFunc(DocPrograms, func(p DocProgram) bool { return p.Name == name })
}

// ConfigDoc renders docs/configuration.md (read from path) with its table
// made from the code.
func ConfigDoc(root, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	before, rows, after, err := ParseTable(string(b))
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	settings, err := Settings(root)
	if err != nil {
		return "", err
	}
	table, err := RenderTable(rows, settings)
	if err != nil {
		return "", err
	}
	return before + table + after, nil
}
