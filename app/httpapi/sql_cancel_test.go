package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/sqlfence"
	"github.com/jobguard/jobguard/tasks"
)

// ledgerRequest is a test task type that writes one row of a PostgreSQL table under sqlfence.
type ledgerRequest struct {
	TenantID string `json:"tenant_id"`
	Entry    string `json:"entry"`
}

func (l *ledgerRequest) Validate() error { return nil }
func (l *ledgerRequest) Tenant() string  { return l.TenantID }
func (l *ledgerRequest) Spec() engine.Spec {
	b, _ := json.Marshal(l)
	return engine.Spec{Type: "ledger", Tenant: l.TenantID, Resource: l.TenantID + ":ledger", Payload: b}
}

// ledgerTask's handler tells started, waits for release ignoring its context (a handler that
// does not stop when cancelled), then commits its row fenced by its token and sends the outcome.
func ledgerTask(started chan<- string, release <-chan struct{}, written chan<- error) tasks.Task {
	return tasks.Task{
		Type:      "ledger",
		Request:   func() tasks.Request { return &ledgerRequest{} },
		SQLFenced: true,
		Handler: guardstack.EngineHandlerOf(func(d tasks.Deps) engine.Handler {
			return func(_ context.Context, job *engine.Job) error {
				var l ledgerRequest
				if err := json.Unmarshal(job.Payload, &l); err != nil {
					return engine.Permanent(err)
				}
				started <- job.ID
				<-release
				ctx := context.Background()
				f := sqlfence.Fence{Token: job.Fence().Token, Owner: job.Fence().Owner}
				err := sqlfence.InTx(ctx, d.SQL, tasks.SQLFenceResource("ledger", l.TenantID+":ledger"), f, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, `INSERT INTO test_ledger (entry) VALUES ($1)`, l.Entry)
					return err
				})
				written <- err
				return err
			}
		}),
	}
}

// A running job is cancelled while its handler, ignoring its context, has yet to commit to
// PostgreSQL under its fence: the cancel raises the SQL fence before its 200, so the late commit
// is refused (a *sqlfence.StaleError) and writes nothing.
func TestCancelRaisesTheSQLFence(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE TABLE test_ledger (entry text)`); err != nil {
		t.Fatal(err)
	}
	started, release, written := make(chan string, 1), make(chan struct{}), make(chan error, 1)
	r := startTasks(t, map[string]string{"DATABASE_URL": url, "DATABASE_MIGRATE": "true"}, []tasks.Task{ledgerTask(started, release, written)})
	resp, answer := post(t, r, "/jobs/ledger", `{"tenant_id":"t1","entry":"late"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, answer)
	}
	var id string
	select {
	case id = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not start")
	}
	if resp, body := post(t, r, "/jobs/"+id+"/cancel", ""); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"was":"processing"`) {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	close(release)
	var werr error
	select {
	case werr = <-written:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler did not write")
	}
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM test_ledger`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(werr, sqlfence.ErrStale) || n != 0 {
		t.Fatalf("the cancelled run's commit after the 200: %v, %d rows; want refused as stale, 0 rows", werr, n)
	}
	waitJob(t, r, id, "cancelled")
}
