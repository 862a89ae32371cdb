package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/tasks"
)

// appPaths are the path prefixes the app serves itself; no task route may start with one.
var appPaths = []string{"/jobs", "/monitoring", "/metrics", "/healthz", "/readyz", "/schedules", "/openapi.json"}

// taskSettings reads the settings of every task in list, after the app's own variables: an unset
// or empty variable has its default. A setting that repeats a variable of the app is an error.
func (p *envParser) taskSettings(list []tasks.Task) map[string]string {
	own := slices.Clone(p.names)
	m := map[string]string{}
	for _, t := range list {
		for _, s := range t.Settings {
			if slices.Contains(own, s.Name) {
				if p.err == nil {
					p.err = fmt.Errorf("app: task %s: setting %s is a variable of the app", t.Type, s.Name)
				}
				return nil
			}
			v := s.Default
			p.str(s.Name, &v)
			m[s.Name] = v
		}
	}
	return m
}

// setting is the value of a task's setting: TaskSettings', else its default.
func (c Config) setting(s tasks.Setting) string {
	if v, ok := c.TaskSettings[s.Name]; ok {
		return v
	}
	return s.Default
}

// validateTasks checks the task list (tasks.Check, no route on the app's paths) and every task's
// settings; a bad setting is a *Error naming its variable, its text redacted.
func (c Config) validateTasks() error {
	if err := tasks.Check(c.Tasks); err != nil {
		return err
	}
	for _, t := range c.Tasks {
		paths := make([]string, 0, len(t.Routes)+len(t.Commands))
		for _, r := range t.Routes {
			paths = append(paths, r.Path)
		}
		for _, c := range t.Commands {
			paths = append(paths, c.Path)
		}
		for _, path := range paths {
			for _, p := range appPaths {
				if path == p || strings.HasPrefix(path, p+"/") {
					return fmt.Errorf("app: task %s: route %s is under %s, a path of the app", t.Type, path, p)
				}
			}
		}
		for _, s := range t.Settings {
			if s.Validate == nil {
				continue
			}
			if err := s.Validate(c.setting(s)); err != nil {
				// The task's own text says what is wrong; secrets a URL in it carries are removed.
				return &Error{Var: s.Name, Err: redact.Error(err)}
			}
		}
	}
	return nil
}

// TaskDeps are the handlers' dependencies: every task's settings, defaults applied.
func (c Config) TaskDeps() tasks.Deps {
	d := tasks.Deps{Settings: map[string]string{}}
	for _, t := range c.Tasks {
		for _, s := range t.Settings {
			d.Settings[s.Name] = c.setting(s)
		}
	}
	return d
}
