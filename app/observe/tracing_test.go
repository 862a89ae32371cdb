package observe

import "testing"

// env is an environment made of m.
func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Tracing is off without OTEL_* variables, on with an endpoint, and off again when disabled.
func TestTracingOffByDefault(t *testing.T) {
	t.Parallel()
	if TracingEnabled(env(nil)) {
		t.Fatal("tracing on without any OTEL_* variable")
	}
	if !TracingEnabled(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"})) {
		t.Fatal("an OTLP endpoint does not turn tracing on")
	}
	if TracingEnabled(env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})) {
		t.Fatal("OTEL_SDK_DISABLED ignored")
	}
}
