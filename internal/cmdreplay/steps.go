package cmdreplay

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
)

// Split parts a recording into the steps that mention marker (a job's id: in an argument or in the
// reply) and the rest (the background: pollers, heartbeats, sweeps). A pipeline that mentions it
// anywhere is the job's whole.
func Split(steps []Step, marker string) (job, background []Step) {
	for _, s := range steps {
		if s.Mentions(marker) {
			job = append(job, s)
		} else {
			background = append(background, s)
		}
	}
	return job, background
}

// Mentions reports whether one of the step's arguments or replies holds marker.
func (s Step) Mentions(marker string) bool {
	for _, c := range s {
		for _, a := range c.Args {
			if contains(a, marker) {
				return true
			}
		}
		if contains(c.Reply, marker) {
			return true
		}
	}
	return false
}

func contains(v any, marker string) bool {
	switch v := v.(type) {
	case string:
		return strings.Contains(v, marker)
	case []byte:
		return bytes.Contains(v, []byte(marker))
	case []any:
		for _, e := range v {
			if contains(e, marker) {
				return true
			}
		}
	case []string:
		for _, e := range v {
			if strings.Contains(e, marker) {
				return true
			}
		}
	}
	return false
}

// Template is a job's steps with the strings that differ between jobs marked: filling it in
// rewrites only the arguments that hold one of them (a script's body is never scanned again).
type Template struct {
	steps []Step
	olds  []string
	// marked[i][j][k]: argument k of command j of step i holds one of olds.
	marked [][][]bool
}

// NewTemplate marks the arguments of steps that hold any of olds.
func NewTemplate(steps []Step, olds ...string) *Template {
	t := &Template{steps: steps, olds: olds, marked: make([][][]bool, len(steps))}
	for i, s := range steps {
		t.marked[i] = make([][]bool, len(s))
		for j, c := range s {
			t.marked[i][j] = make([]bool, len(c.Args))
			for k, a := range c.Args {
				for _, old := range olds {
					if contains(a, old) {
						t.marked[i][j][k] = true
					}
				}
			}
		}
	}
	return t
}

// Fill is the steps with each old (in NewTemplate's order) replaced by news' string at the same
// place. Each new must have its old's length: the arguments hold protobuf messages (asynq's)
// whose lengths are encoded.
func (t *Template) Fill(news ...string) ([]Sent, error) {
	if len(news) != len(t.olds) {
		return nil, fmt.Errorf("cmdreplay: %d substitutes for %d strings", len(news), len(t.olds))
	}
	pairs := make([]string, 0, 2*len(news))
	for i, n := range news {
		if len(n) != len(t.olds[i]) {
			return nil, fmt.Errorf("cmdreplay: %q and %q differ in length", t.olds[i], n)
		}
		pairs = append(pairs, t.olds[i], n)
	}
	r := strings.NewReplacer(pairs...)
	out := make([]Sent, len(t.steps))
	for i, s := range t.steps {
		out[i] = make(Sent, len(s))
		for j, c := range s {
			args := c.Args
			if slices.Contains(t.marked[i][j], true) {
				args = slices.Clone(args)
				for k, a := range args {
					if !t.marked[i][j][k] {
						continue
					}
					switch a := a.(type) {
					case string:
						args[k] = r.Replace(a)
					case []byte:
						args[k] = []byte(r.Replace(string(a)))
					}
				}
			}
			out[i][j] = args
		}
	}
	return out, nil
}

// Sent is the step's commands unchanged.
func (s Step) Sent() Sent {
	out := make(Sent, len(s))
	for i, c := range s {
		out[i] = c.Args
	}
	return out
}
