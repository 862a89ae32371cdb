package app

import "testing"

// lookupFrom is an environment made of env, for config.FromLookup and Main.
func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// Every role name parses, and nothing else does.
func TestParseRole(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Role{"": RoleAll, "all": RoleAll, "api": RoleAPI, "worker": RoleWorker} {
		if got, err := ParseRole(in); err != nil || got != want {
			t.Errorf("ParseRole(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseRole("scheduler"); err == nil {
		t.Error("unknown role accepted")
	}
}
