package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/jobguard/jobguard/app/strictjson"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/tasks"
)

// scheduleEntry is one element of SCHEDULES, read with the API's strict JSON rules.
type scheduleEntry struct {
	Name     string         `json:"name"`
	Spec     string         `json:"spec"`
	Type     string         `json:"type"`
	Payload  jsontext.Value `json:"payload,omitempty"`
	Timezone string         `json:"timezone,omitempty"`
	Overlap  string         `json:"overlap,omitempty"`
	CatchUp  string         `json:"catchup,omitempty"`
}

// parseSchedules reads SCHEDULES: a JSON array of schedules. The error names the entry (from 1)
// and the field.
func parseSchedules(v string) ([]schedule.Spec, error) {
	var entries []scheduleEntry
	if err := strictjson.Decode([]byte(v), &entries); err != nil {
		var he *strictjson.FieldError
		if errors.As(err, &he) && he.Field != "body" {
			idx, field, _ := strings.Cut(he.Field, ".")
			var n int
			if _, serr := fmt.Sscanf(idx, "%d", &n); serr == nil {
				return nil, fmt.Errorf("entry %d: %s: %s", n+1, field, he.Detail)
			}
		}
		return nil, errors.New("must be a JSON array of {\"name\",\"spec\",\"type\",\"payload\",\"timezone\",\"overlap\",\"catchup\"}")
	}
	out := make([]schedule.Spec, len(entries))
	for i, e := range entries {
		out[i] = schedule.Spec{Name: e.Name, Cron: e.Spec, Type: e.Type, Payload: []byte(e.Payload), Timezone: e.Timezone,
			Overlap: schedule.Overlap(e.Overlap), CatchUp: schedule.CatchUp(e.CatchUp)}
	}
	return out, nil
}

// AllSchedules are the schedules the task types declare in code, then those of SCHEDULES.
func (c Config) AllSchedules() []schedule.Spec {
	var out []schedule.Spec
	for _, t := range c.Tasks {
		for _, s := range t.Schedules {
			if s.Type == "" {
				s.Type = t.Type
			}
			out = append(out, s)
		}
	}
	return append(out, c.Schedules...)
}

// validateSchedules checks every schedule (schedule.Spec.Validate), that its type is a task
// type of the process and its payload that task's valid request, and that names are unique.
func (c Config) validateSchedules() error {
	seen := map[string]bool{}
	build := BuildJob(c.Tasks)
	code := len(c.AllSchedules()) - len(c.Schedules)
	for i, s := range c.AllSchedules() {
		where := fmt.Sprintf("entry %d (%q)", i-code+1, s.Name)
		if i < code {
			where = fmt.Sprintf("task %s's schedule %q (in code)", s.Type, s.Name)
		}
		err := s.Validate()
		if err == nil && seen[s.Name] {
			err = &schedule.FieldError{Field: "name", Detail: "is another schedule's too"}
		}
		if err == nil {
			_, err = build(s)
		}
		if err != nil {
			return &Error{Var: "SCHEDULES", Err: fmt.Errorf("%s: %w", where, err)}
		}
		seen[s.Name] = true
	}
	return nil
}

// BuildJob turns a schedule into its job: the payload is decoded into the task type's request
// as POST /jobs/<type> would, and validated.
func BuildJob(list []tasks.Task) func(schedule.Spec) (engine.Spec, error) {
	return func(s schedule.Spec) (engine.Spec, error) {
		var task tasks.Task
		found := false
		for _, t := range list {
			if t.Type == s.Type {
				task, found = t, true
			}
		}
		if !found {
			return engine.Spec{}, &schedule.FieldError{Field: "type", Detail: fmt.Sprintf("%q is not a task type of this process", s.Type)}
		}
		req := task.Request()
		payload := s.Payload
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		if err := strictjson.Decode(payload, req); err != nil {
			var he *strictjson.FieldError
			errors.As(err, &he)
			return engine.Spec{}, &schedule.FieldError{Field: "payload", Detail: he.Detail}
		}
		if err := req.Validate(); err != nil {
			var fe *tasks.FieldError
			if errors.As(err, &fe) {
				return engine.Spec{}, &schedule.FieldError{Field: "payload." + fe.Field, Detail: fe.Detail}
			}
			return engine.Spec{}, &schedule.FieldError{Field: "payload", Detail: err.Error()}
		}
		return req.Spec(), nil
	}
}

// parseOperatorTokens reads OPERATOR_TOKENS: comma-separated tokens of at least 16 characters.
func parseOperatorTokens(v string) (map[string]string, error) {
	m := map[string]string{}
	for i, part := range strings.Split(v, ",") {
		tok := strings.TrimSpace(part)
		// Tokens are never echoed back: the error names the entry by position only.
		if len(tok) < 16 || strings.ContainsAny(tok, " \t:") {
			return nil, fmt.Errorf("entry %d is not a token of at least 16 characters without blanks or ':'", i+1)
		}
		if _, dup := m[tok]; dup {
			return nil, fmt.Errorf("entry %d repeats a token", i+1)
		}
		m[tok] = "operator"
	}
	return m, nil
}
