package cmdreplay

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// A recorded job's steps (found by its id, the background left out) replay for other ids: each
// replayed job writes its own keys, with the protobuf-safe same-length substitutes.
func TestRecordSplitAndReplay(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	ctx := context.Background()
	rec := &Recorder{}
	db.Client.AddHook(rec)
	rec.Start()
	db.Client.Set(ctx, "heartbeat", "1", time.Minute) // background: names no job
	pipe := db.Client.Pipeline()
	pipe.HSet(ctx, "job:aaaa", "tenant", "t-01")
	pipe.SAdd(ctx, "tenant:t-01", "aaaa")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	job, background := Split(rec.Stop(), "aaaa")
	heartbeat := slices.ContainsFunc(background, func(s Step) bool { return len(s) == 1 && s[0].Args[1] == "heartbeat" })
	if len(job) != 1 || len(job[0]) != 2 || !heartbeat {
		t.Fatalf("split: %d job steps %v, background %v", len(job), job, background)
	}
	tmpl := NewTemplate(job, "aaaa", "t-01")
	if _, err := tmpl.Fill("bb", "t-02"); err == nil {
		t.Fatal("a substitute of another length was taken")
	}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	defer rdb.Close()
	r := Replay(ctx, rdb, Load{Connections: 2, Batch: 3, For: 50 * time.Millisecond, Job: func(n, _ int) []Sent {
		sent, err := tmpl.Fill(string(rune('a'+n%26))+"bcd", "t-02")
		if err != nil {
			panic(err)
		}
		return sent
	}})
	if r.Jobs < 6 || r.Failures != 0 || r.Commands != 2*r.Jobs {
		t.Fatalf("replay: %+v", r)
	}
	if v := rdb.HGet(ctx, "job:bbcd", "tenant").Val(); v != "t-02" {
		t.Fatalf("replayed job bbcd's tenant %q, want t-02", v)
	}
	if !rdb.SIsMember(ctx, "tenant:t-02", "bbcd").Val() || rdb.Exists(ctx, "tenant:t-01").Val() != 1 {
		t.Fatal("the replayed jobs did not write their own tenant's set beside the recorded one")
	}
}
