// Package docs_test checks the repository's Markdown: every Go snippet compiles and no line is
// longer than a reader's screen. It has no code of its own; docs/DEVELOPMENT.md says how to write
// a snippet these tests accept.
package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxLineLength is the longest Markdown line, in characters: longer lines are unreadable in a
// terminal and in a diff.
const maxLineLength = 200

// markdownFile is one Markdown file of the repository: its path from the root, and its lines.
type markdownFile struct {
	path  string
	lines []string
}

// repositoryRoot is the absolute path of the repository, the parent of docs/.
func repositoryRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// markdownFiles reads every Markdown file under root, but those under testdata/, node_modules/ and
// hidden directories: fixtures and vendored packages are not our prose.
func markdownFiles(t *testing.T, root string) []markdownFile {
	t.Helper()
	var files []markdownFile
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".md") {
			return nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		files = append(files, markdownFile{path: rel, lines: strings.Split(string(content), "\n")})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no Markdown file under %s", root)
	}
	return files
}

func TestNoMarkdownLineIsLongerThan200Characters(t *testing.T) {
	t.Parallel()
	for _, file := range markdownFiles(t, repositoryRoot(t)) {
		for i, line := range file.lines {
			if n := utf8.RuneCountInString(line); n > maxLineLength {
				t.Errorf("%s:%d is %d characters long, want at most %d: rewrap it", file.path, i+1, n, maxLineLength)
			}
		}
	}
}
