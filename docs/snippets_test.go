package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/internal/testsupport"
)

// Where a snippet is built: as a separate application that requires jobguard (the library's
// users), or as a package of jobguard's own module path, which may import internal/ (the
// template's users, who write their tasks inside the repository).
const (
	applicationModule = "example.com/snippets"
	templateModule    = "github.com/jobguard/jobguard/docsnippets"
)

// The hidden comment that wraps the next Go block: "<!-- snippet: application" or
// "<!-- snippet: template", then the file around the block with a line "// snippet" where the
// block goes, then "-->". Without a "// snippet" line the block is a whole file.
const (
	wrapperOpening     = "<!-- snippet: "
	wrapperClosing     = "-->"
	wrapperPlaceholder = "// snippet"
)

// snippet is one Go block of a Markdown file, made into a whole Go file.
type snippet struct {
	doc    string // the Markdown file, from the repository root
	line   int    // the line of the block's opening fence
	module string // applicationModule or templateModule
	source string // the Go file, with //line directives back to the Markdown
}

// wrapper is a parsed snippet comment.
type wrapper struct {
	module      string
	firstLine   int // the Markdown line of lines[0]
	lines       []string
	placeholder int // index in lines of "// snippet", -1 for a whole file
}

// Every ```go block of the repository's Markdown compiles and passes go vet, whole or inside its
// hidden wrapper, in one go build and one go vet per kind of module.
func TestEveryGoSnippetInTheMarkdownCompiles(t *testing.T) {
	t.Parallel()
	root := repositoryRoot(t)
	var all []snippet
	for _, file := range markdownFiles(t, root) {
		found, problems := snippetsOf(file)
		for _, p := range problems {
			t.Error(p)
		}
		all = append(all, found...)
	}
	if len(all) == 0 {
		t.Fatal("found no Go snippet in the repository's Markdown")
	}
	if out, err := buildSnippets(t, root, all); err != nil {
		t.Fatalf("the Markdown's Go snippets do not compile (see docs/DEVELOPMENT.md, \"Go snippets in the docs\"): %v\n%s", err, out)
	}
	t.Logf("%d Go snippets compile", len(all))
}

// A snippet with the wrong fence conversion fails the build, and the error names the Markdown
// file and line, so the test above cannot pass by building nothing.
func TestABrokenSnippetFailsTheBuildAtItsMarkdownLine(t *testing.T) {
	t.Parallel()
	root := repositoryRoot(t)
	doc := markdownFile{path: "BROKEN.md", lines: strings.Split(`# Broken

<!-- snippet: application
package main

import (
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/sqlfence"
)

func main() {
	var f locking.Fence
	// snippet
}
-->
`+"```go"+`
_ = sqlfence.Fence(f)
`+"```", "\n")}
	found, problems := snippetsOf(doc)
	if len(problems) > 0 || len(found) != 1 {
		t.Fatalf("parsed %d snippets, problems %v; want one and none", len(found), problems)
	}
	out, err := buildSnippets(t, root, found)
	if err == nil {
		t.Fatal("a snippet converting locking.Fence to sqlfence.Fence built")
	}
	if !strings.Contains(string(out), "BROKEN.md:17") {
		t.Fatalf("the build error does not name BROKEN.md:17:\n%s", out)
	}
}

// snippetsOf returns the Go blocks of file made whole, and what is wrong with the blocks it could
// not make whole.
func snippetsOf(file markdownFile) ([]snippet, []string) {
	var found []snippet
	var problems []string
	var pending *wrapper
	for i := 0; i < len(file.lines); i++ {
		trimmed := strings.TrimSpace(file.lines[i])
		switch {
		case strings.HasPrefix(trimmed, wrapperOpening):
			w, next, err := parseWrapper(file.lines, i)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %v", file.path, i+1, err))
			}
			pending, i = w, next
		case strings.HasPrefix(trimmed, "```"):
			body, next := fencedBlock(file.lines, i)
			if trimmed == "```go" {
				s, err := wholeFile(file.path, i+1, body, pending)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: %v", file.path, i+1, err))
				} else {
					found = append(found, s)
				}
			} else if pending != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: a snippet wrapper before a %s block", file.path, i+1, trimmed))
			}
			pending, i = nil, next
		case trimmed != "" && pending != nil:
			problems = append(problems, fmt.Sprintf("%s:%d: a snippet wrapper not followed by a ```go block", file.path, i+1))
			pending = nil
		}
	}
	return found, problems
}

// parseWrapper reads the snippet comment opening at lines[start]; it returns the index of its
// closing line.
func parseWrapper(lines []string, start int) (*wrapper, int, error) {
	kind := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[start]), wrapperOpening))
	w := &wrapper{firstLine: start + 2, placeholder: -1}
	switch strings.TrimSpace(strings.TrimSuffix(kind, wrapperClosing)) {
	case "application":
		w.module = applicationModule
	case "template":
		w.module = templateModule
	default:
		return nil, start, fmt.Errorf("snippet kind %q, want application or template", kind)
	}
	if strings.HasSuffix(kind, wrapperClosing) {
		return w, start, nil
	}
	for i := start + 1; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == wrapperClosing {
			return w, i, nil
		}
		if strings.TrimSpace(lines[i]) == wrapperPlaceholder {
			w.placeholder = len(w.lines)
		}
		w.lines = append(w.lines, lines[i])
	}
	return nil, len(lines), fmt.Errorf("a snippet wrapper without its closing %s", wrapperClosing)
}

// fencedBlock returns the lines inside the fence opening at lines[start], less the fence's
// indentation (a block inside a list item is indented), and the index of the closing fence: a
// line of at least as many backticks, so a ````markdown block may show a ```go one.
func fencedBlock(lines []string, start int) ([]string, int) {
	opening := strings.TrimLeft(lines[start], " \t")
	indent := lines[start][:len(lines[start])-len(opening)]
	fence := opening[:len(opening)-len(strings.TrimLeft(opening, "`"))]
	var body []string
	for i := start + 1; i < len(lines); i++ {
		if closing := strings.TrimSpace(lines[i]); strings.HasPrefix(closing, fence) && strings.Trim(closing, "`") == "" {
			return body, i
		}
		body = append(body, strings.TrimPrefix(lines[i], indent))
	}
	return body, len(lines)
}

var packageClause = regexp.MustCompile(`(?m)^package \w+`)

// wholeFile makes the block opening at Markdown line fence a Go file: the block itself when it
// has no wrapper, or the wrapper with the block in place of its "// snippet" line. Each part
// starts with a //line directive, so compile errors name the Markdown file and line.
func wholeFile(doc string, fence int, body []string, w *wrapper) (snippet, error) {
	s := snippet{doc: doc, line: fence, module: applicationModule}
	directive := func(line int) string { return fmt.Sprintf("//line %s:%d\n", doc, line) }
	block := directive(fence+1) + strings.Join(body, "\n") + "\n"
	switch {
	case w == nil || w.placeholder < 0:
		if !packageClause.MatchString(strings.Join(body, "\n")) {
			return s, fmt.Errorf("a Go block that is neither a whole file nor after a %q wrapper (see docs/DEVELOPMENT.md)", wrapperOpening)
		}
		s.source = block
	default:
		s.source = directive(w.firstLine) + strings.Join(w.lines[:w.placeholder], "\n") + "\n" +
			block + directive(w.firstLine+w.placeholder+1) + strings.Join(w.lines[w.placeholder+1:], "\n") + "\n"
	}
	if w != nil {
		s.module = w.module
	}
	return s, nil
}

// buildSnippets writes each snippet as the one file of a package of its own in a temporary module
// of its kind, then runs go build and go vet once over each module.
func buildSnippets(t *testing.T, root string, all []snippet) ([]byte, error) {
	t.Helper()
	byModule := map[string][]snippet{}
	for _, s := range all {
		byModule[s.module] = append(byModule[s.module], s)
	}
	for _, module := range []string{applicationModule, templateModule} {
		if len(byModule[module]) == 0 {
			continue
		}
		dir := testsupport.NewModule(t, root, module)
		for _, s := range byModule[module] {
			testsupport.WriteFile(t, filepath.Join(dir, packageDir(s), "snippet.go"), s.source)
		}
		for _, step := range [][]string{{"build", "-o", os.DevNull, "./..."}, {"vet", "./..."}} {
			if out, err := testsupport.GoIn(dir, step...); err != nil {
				return out, fmt.Errorf("go %s in %s: %w", step[0], module, err)
			}
		}
	}
	return nil, nil
}

var notIdentifier = regexp.MustCompile(`[^a-z0-9]+`)

// packageDir names a snippet's package directory after its Markdown file and line.
func packageDir(s snippet) string {
	return notIdentifier.ReplaceAllString(strings.ToLower(s.doc), "_") + fmt.Sprintf("_%d", s.line)
}
