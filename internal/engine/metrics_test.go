package engine

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Every label value the package's code counts with is in the lists initSeries creates at zero, so
// a new bounce reason, status or outcome cannot be forgotten there. The code is read, not run: each
// label argument must be a string literal from the list or one of the few indirections below, whose
// sources are checked in turn.
func TestEveryLabelValueIsKnown(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	// known lists, per collector field of metrics, the values of each label after the type.
	known := map[string][][]string{
		"transitions": {jobStatuses}, "duration": {runOutcomes}, "lease": {leaseEvents},
		"retries": {mapValues(classNames)}, "bounces": {bounceReasons}, "rescues": {rescueOutcomes},
		"dedup":       {mapKeys(dedupResults), allDedupResults()},
		"reconciled":  {repairKinds},
		"expired":     {expiredReasons},
		"staleWrites": {}, "invalid": {}, "staleDeliveries": {}, "deadLettered": {}, "alreadyApplied": {}, "queueWait": {}, "undecryptable": {}, "fairAdmitted": {},
	}
	// indirect are label arguments that are not literals, and the list their source is checked against.
	indirect := map[string][]string{
		"reason":                    bounceReasons,       // bounce's parameter: its callers' literals are checked
		"string(o.Status)":          jobStatuses,         // jobstore.Outcome{Status: ...} values are checked
		"outcomeOf(err)":            runOutcomes,         // outcomeOf's returns are checked
		"classNames[class]":         known["retries"][0], // initSeries ranges over classNames itself
		"string(spec.Dedup.Policy)": known["dedup"][0],   // every Policy constant is checked below
		"kind":                      repairKinds,         // counted's parameter: its callers pass the Repair* constants repairKinds lists
	}
	check := func(pos token.Pos, what, v string, list []string) {
		if !slices.Contains(list, v) {
			t.Errorf("%s: %s %q is not in the known label values (engine/metrics.go)", fset.Position(pos), what, v)
		}
	}
	lit := func(e ast.Expr) (string, bool) {
		if b, ok := e.(*ast.BasicLit); ok && b.Kind == token.STRING {
			s, err := strconv.Unquote(b.Value)
			return s, err == nil
		}
		return "", false
	}
	calls := 0
	for _, file := range files {
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Name.Name == "outcomeOf" {
					ast.Inspect(n.Body, func(n ast.Node) bool {
						if r, ok := n.(*ast.ReturnStmt); ok {
							v, ok := lit(r.Results[0])
							if !ok {
								t.Errorf("%s: outcomeOf returns a non-literal", fset.Position(r.Pos()))
							}
							check(r.Pos(), "outcome", v, runOutcomes)
						}
						return true
					})
				}
				if n.Name.Name == "initSeries" {
					return false // it ranges over the lists themselves
				}
			case *ast.CompositeLit:
				if types.ExprString(n.Type) == "jobstore.Outcome" {
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok && types.ExprString(kv.Key) == "Status" {
							v, ok := statusConst(kv.Value)
							if !ok {
								t.Errorf("%s: outcome status %s is not a jobstore status constant", fset.Position(kv.Pos()), types.ExprString(kv.Value))
							}
							check(kv.Pos(), "status", v, jobStatuses)
						}
					}
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "bounce":
					v, ok := lit(n.Args[1])
					if !ok {
						t.Errorf("%s: bounce reason %s is not a literal", fset.Position(n.Pos()), types.ExprString(n.Args[1]))
					}
					check(n.Pos(), "bounce reason", v, bounceReasons)
				case "WithLabelValues":
					field, ok := sel.X.(*ast.SelectorExpr)
					if !ok || !strings.HasSuffix(types.ExprString(field.X), "m") {
						return true
					}
					lists, ok := known[field.Sel.Name]
					if !ok {
						t.Errorf("%s: collector %s has no known label values", fset.Position(n.Pos()), field.Sel.Name)
						return true
					}
					calls++
					if typ := types.ExprString(n.Args[0]); typ != "typ" && !strings.HasSuffix(typ, ".Type") {
						t.Errorf("%s: first label %s is not a task type", fset.Position(n.Pos()), typ)
					}
					if len(n.Args)-1 != len(lists) {
						t.Errorf("%s: %s takes %d labels after the type, known lists %d", fset.Position(n.Pos()), field.Sel.Name, len(n.Args)-1, len(lists))
						return true
					}
					for i, a := range n.Args[1:] {
						if v, ok := lit(a); ok {
							check(a.Pos(), field.Sel.Name+" label", v, lists[i])
							continue
						}
						src, ok := indirect[types.ExprString(a)]
						if !ok || !slices.Equal(src, lists[i]) {
							t.Errorf("%s: %s label %s: an unknown source of values", fset.Position(a.Pos()), field.Sel.Name, types.ExprString(a))
						}
					}
				}
			}
			return true
		})
	}
	if calls < 20 {
		t.Fatalf("found only %d labelled counts: the scan no longer sees the code", calls)
	}
	// Every Policy constant declared in the package, not only those named above.
	policies := 0
	for _, file := range files {
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if vs.Type == nil || types.ExprString(vs.Type) != "Policy" {
					continue
				}
				policies++
				if _, ok := dedupResults[Policy(mustLit(t, vs.Values[0]))]; !ok {
					t.Errorf("policy constant %s is missing from dedupResults", vs.Names[0])
				}
			}
		}
	}
	if policies != len(dedupResults) {
		t.Errorf("%d Policy constants, %d policies in dedupResults", policies, len(dedupResults))
	}
}

func mustLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	b, ok := e.(*ast.BasicLit)
	if !ok {
		t.Fatalf("not a literal: %s", types.ExprString(e))
	}
	s, err := strconv.Unquote(b.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mapValues[K comparable](m map[K]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

func mapKeys(m map[Policy][]string) []string {
	var out []string
	for p := range m {
		out = append(out, string(p))
	}
	slices.Sort(out)
	return out
}

func allDedupResults() []string {
	var out []string
	for _, rs := range dedupResults {
		for _, r := range rs {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	slices.Sort(out)
	return out
}

// statusConst reads a jobstore.StatusX constant as its value.
func statusConst(e ast.Expr) (string, bool) {
	name, ok := strings.CutPrefix(types.ExprString(e), "jobstore.Status")
	if !ok {
		return "", false
	}
	for _, st := range jobstore.Statuses {
		if strings.EqualFold(string(st), name) {
			return string(st), true
		}
	}
	return "", false
}
