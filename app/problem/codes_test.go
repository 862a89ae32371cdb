package problem

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestProblemCodesAreOneList: every code is listed once, snake_case, and every code the error
// handler's maps give is listed (the unread requests' codes: app's TestUnreadCodesAreKinds).
func TestProblemCodesAreOneList(t *testing.T) {
	t.Parallel()
	listed := map[string]bool{}
	for _, k := range Kinds {
		if listed[k.Code] || k.Meaning == "" || k.Action == "" || strings.Trim(k.Code, "abcdefghijklmnopqrstuvwxyz_") != "" {
			t.Errorf("kind %+v: duplicate, not snake_case or without meaning and action", k)
		}
		listed[k.Code] = true
	}
	var mapped []string
	for _, c := range CodeForStatus {
		mapped = append(mapped, c)
	}
	for _, c := range webCodes {
		mapped = append(mapped, c)
	}
	for _, c := range mapped {
		if !listed[c] {
			t.Errorf("code %q is mapped but not in Kinds", c)
		}
	}
}

// TestREADMEErrorTableListsEveryCode parses the error table of docs/HTTP_API.md (code, status, type, meaning,
// what a client should do) and checks that it lists exactly Kinds, in order, with their
// status and type.
func TestREADMEErrorTableListsEveryCode(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../docs/HTTP_API.md")
	if err != nil {
		t.Fatal(err)
	}
	const header = "| code | status | type | meaning | what a client should do |"
	lines := strings.Split(string(readme), "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == header {
			start = i + 2 // past the |---| line
			break
		}
	}
	if start < 0 {
		t.Fatalf("README has no error table headed %q", header)
	}
	var rows [][]string
	for _, l := range lines[start:] {
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		if len(cells) != 5 {
			t.Fatalf("README error table row %q has %d cells, want 5", l, len(cells))
		}
		rows = append(rows, cells)
	}
	if len(rows) != len(Kinds) {
		t.Errorf("README error table has %d rows, codes.go %d kinds", len(rows), len(Kinds))
	}
	for i := 0; i < min(len(rows), len(Kinds)); i++ {
		k, row := Kinds[i], rows[i]
		status := strconv.Itoa(k.Status)
		if k.Status == 0 {
			status = "any"
		}
		if row[0] != k.Code || row[1] != status || row[2] != k.Type() {
			t.Errorf("README error table row %d is %q %q %q, want %q %q %q", i+1, row[0], row[1], row[2], k.Code, status, k.Type())
		}
	}
}
