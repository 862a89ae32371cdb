package httpapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/seal"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/tasks/registry"
)

// newKey is a fresh base64 AES-256 key.
func newKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, seal.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// With ENCRYPT_TYPES, a reserve-stock job's payload and result are ciphertext in its Redis record
// and timeline and in its SQL copy; the API shows the result decrypted (from Redis and from SQL),
// the monitoring UI "encrypted" unless MONITORING_DECRYPT; jobguard jobs reencrypt moves the copy
// to a new current key.
func TestEncryptedTypeAtRestInRedisAndSQL(t *testing.T) {
	t.Parallel()
	keyA, keyB := newKey(t), newKey(t)
	env := map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL(),
		"ENCRYPT_TYPES": "reserve-stock", "ENCRYPTION_KEYS": "a:" + keyA}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAll, env)
	resp, answer := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o1","sku":"s1","quantity":7}`, bearer(tokenA)...)
	if resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, answer)
	}
	id := resp.Header.Get("Location")[len("/jobs/"):]
	// The handler saw the plaintext payload (it reserved 7), and the API shows the result.
	if v := waitJob(t, r, id, "done", bearer(tokenA)...); v.Result != "reserved_total=7" {
		t.Fatalf("API result %q", v.Result)
	}
	plain := []string{"quantity", "reserved_total"} // of the payload's JSON and of the result
	k, _ := r.API().deps.Stack.Store().Keys(id, "")
	rec := r.Redis().HGetAll(t.Context(), k.Record).Val()
	timeline := strings.Join(r.Redis().LRange(t.Context(), k.Timeline, 0, -1).Val(), "\n")
	for _, f := range []string{jobstore.FieldPayload, jobstore.FieldResult} {
		if !seal.Sealed(rec[f]) || seal.KeyID(rec[f]) != "a" {
			t.Errorf("Redis %s: %q", f, rec[f])
		}
	}
	for _, p := range plain {
		for f, v := range rec {
			if strings.Contains(v, p) {
				t.Errorf("Redis record field %s holds %q: %q", f, p, v)
			}
		}
		if strings.Contains(timeline, p) {
			t.Errorf("Redis timeline holds %q: %s", p, timeline)
		}
	}

	// The monitoring UI: "encrypted", unless configured to decrypt.
	for _, decrypt := range []bool{false, true} {
		j, err := monitoringJobs{stack: r.API().deps.Stack, decrypt: decrypt}.Job(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		want := map[bool]string{false: encryptedLabel, true: "reserved_total=7"}[decrypt]
		if j.Result != want || j.Record[jobstore.FieldResult] != want || j.Record[jobstore.FieldPayload] != encryptedLabel {
			t.Errorf("monitoring (decrypt %v): result %q, record %q", decrypt, j.Result, j.Record)
		}
	}

	var sqlRec, sqlTimeline string
	testsupport.Eventually(t, 20*time.Second, "the job's copy", func() bool {
		return r.API().deps.SQL.QueryRow(t.Context(), "SELECT record::text, timeline::text FROM jobguard_job_history WHERE job_id = $1", id).
			Scan(&sqlRec, &sqlTimeline) == nil
	})
	for _, p := range plain {
		if strings.Contains(sqlRec, p) || strings.Contains(sqlTimeline, p) {
			t.Errorf("SQL row holds %q: %s %s", p, sqlRec, sqlTimeline)
		}
	}
	// Redis lets the job go: the API reads the SQL copy, decrypted.
	letGo(t, r, id)
	if v := waitJob(t, r, id, "done", bearer(tokenA)...); v.Result != "reserved_total=7" {
		t.Fatalf("API result from SQL %q", v.Result)
	}

	// Rotation: b current, a kept for reading; reencrypt moves the copy to b.
	var out, errOut strings.Builder
	rot := map[string]string{"REDIS_URL": env["REDIS_URL"], "DATABASE_URL": env["DATABASE_URL"], "ENCRYPT_TYPES": "reserve-stock",
		"ENCRYPTION_KEYS": "b:" + keyB + ",a:" + keyA}
	if code := runMain(t.Context(), []string{"jobs", "reencrypt", "-o", "json"}, lookupFrom(rot), &out, &errOut, registry.All()); code != 0 {
		t.Fatalf("reencrypt: exit %d %s %s", code, out.String(), errOut.String())
	}
	// What jobguard jobs reencrypt -o json prints per store (app's reencryptReport, read as its output).
	var reports []struct {
		Store     string   `json:"store"`
		Rewritten int      `json:"rewritten"`
		Failed    []string `json:"failed"`
	}
	if decodeOutput(t, out.String(), &reports); len(reports) != 2 || reports[1].Store != "sql" || reports[1].Rewritten != 2 {
		t.Fatalf("reencrypt: %s", out.String())
	}
	var payload, result string
	if err := r.API().deps.SQL.QueryRow(t.Context(), "SELECT record->>'payload', record->>'result' FROM jobguard_job_history WHERE job_id = $1", id).
		Scan(&payload, &result); err != nil || seal.KeyID(payload) != "b" || seal.KeyID(result) != "b" {
		t.Fatalf("after reencrypt: %q %q %v", payload, result, err)
	}
	// Without a, the job's copy still opens (b); a second pass has nothing to do.
	out.Reset()
	rot["ENCRYPTION_KEYS"] = "b:" + keyB
	if code := runMain(t.Context(), []string{"jobs", "reencrypt", "-o", "json"}, lookupFrom(rot), &out, &errOut, registry.All()); code != 0 {
		t.Fatalf("reencrypt with b alone: exit %d %s %s", code, out.String(), errOut.String())
	}
	if decodeOutput(t, out.String(), &reports); reports[1].Rewritten != 0 || len(reports[1].Failed) != 0 {
		t.Fatalf("second pass: %s", out.String())
	}
	if strings.Contains(out.String()+errOut.String(), keyA) || strings.Contains(out.String()+errOut.String(), keyB) {
		t.Fatal("reencrypt printed a key")
	}
}

// Configuration errors name the variable and never the key.
func TestEncryptionConfigErrorsNameTheVariableNotTheKey(t *testing.T) {
	t.Parallel()
	good := newKey(t)
	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad")
	if err := os.WriteFile(badFile, []byte("a:"+short+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	goodFile := filepath.Join(dir, "good")
	if err := os.WriteFile(goodFile, []byte("# current first\nb:"+good+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"ENCRYPTION_KEYS": "a:" + short}, "ENCRYPTION_KEYS"},
		{map[string]string{"ENCRYPTION_KEYS": "a" + good}, "ENCRYPTION_KEYS"},
		{map[string]string{"ENCRYPTION_KEYS": "a:" + good + ",a:" + good}, "ENCRYPTION_KEYS"},
		{map[string]string{"ENCRYPTION_KEYS": "a:!" + good}, "ENCRYPTION_KEYS"},
		{map[string]string{"ENCRYPTION_KEYS_FILE": badFile}, "ENCRYPTION_KEYS_FILE"},
		{map[string]string{"ENCRYPTION_KEYS_FILE": filepath.Join(dir, "missing")}, "ENCRYPTION_KEYS_FILE"},
		{map[string]string{"ENCRYPTION_KEYS": "a:" + good, "ENCRYPTION_KEYS_FILE": goodFile}, "ENCRYPTION_KEYS_FILE"},
		{map[string]string{"ENCRYPT_TYPES": "no-such-type", "ENCRYPTION_KEYS": "a:" + good}, "ENCRYPT_TYPES"},
		{map[string]string{"ENCRYPT_TYPES": "reserve-stock"}, "ENCRYPT_TYPES"},
		{map[string]string{"MONITORING_DECRYPT": "maybe"}, "MONITORING_DECRYPT"},
	} {
		_, err := config.FromLookup(lookupFrom(c.env), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != c.want {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.want)
			continue
		}
		for _, secret := range []string{good, short, good[1:]} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%v: the error quotes a key: %v", c.env, err)
			}
		}
	}
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"ENCRYPTION_KEYS_FILE": goodFile, "ENCRYPT_TYPES": "reserve-stock, rebuild-cache"}), registry.All())
	if err != nil || cfg.EncryptionKeys.Current() != "b" || len(config.EncryptedTypes(cfg.Tasks)) != 2 {
		t.Fatalf("%v, %v", cfg.EncryptionKeys, err)
	}
}

// decodeOutput reads a command's --output json.
func decodeOutput(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
}
