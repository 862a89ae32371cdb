package jobstore

import (
	"embed"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/scriptfs"
	"github.com/jobguard/jobguard/locking"
)

//go:embed scripts/*.lua
var scriptFS embed.FS

var scripts = scriptfs.Dir(scriptFS)

// EffectFrame wraps an effect's body (engine.NewEffect): the applied-operation check before it and
// the applied record after it, in one fenced script (scripts/effect.lua).
func EffectFrame(body string) string {
	return strings.Replace(scripts.Read("effect.lua"), "-- EFFECT_BODY\n", body+"\n", 1)
}

// prelude is put before every job script's body, after locking's protocol fragment.
var prelude = scripts.Read("prelude.lua")

// script builds a job script: locking's protocol fragment, the job prelude, then the body.
func script(name string) *redis.Script { return NewScript(scripts.Read(name)) }

var (
	createScript   = script("create.lua")
	confirmScript  = script("confirm.lua")
	pendingScript  = script("pending.lua")
	abandonScript  = script("abandon.lua")
	replaceScript  = script("replace.lua")
	startScript    = script("start.lua")
	finishScript   = script("finish.lua")
	eventScript    = script("event.lua")
	replayScript   = script("replay.lua")
	rescueScript   = script("rescue.lua")
	unrescueScript = script("unrescue.lua")
	// rescueUnstartedScript: see rescue_unstarted.go.
	rescueUnstartedScript = script("rescue_unstarted.lua")
	cancelScript          = script("cancel.lua")
	listScript            = script("list.lua")
	timelineScript        = script("timeline.lua")
	expireScript          = script("expire.lua")
	// A workflow's scripts (workflow.go).
	wfConfirmScript = script("wf_confirm.lua")
	wfEndedScript   = script("wf_ended.lua")
	wfReleaseScript = script("wf_release.lua")
	wfSkipScript    = script("wf_skip.lua")
	wfCancelScript  = script("wf_cancel.lua")
	// allScripts are loaded by the test that checks every script compiles in a real Redis.
	allScripts = []*redis.Script{createScript, confirmScript, pendingScript, abandonScript, replaceScript,
		startScript, finishScript, eventScript, replayScript, rescueScript, unrescueScript, rescueUnstartedScript,
		cancelScript, listScript, timelineScript, expireScript, resealScript, wfConfirmScript, wfEndedScript,
		wfReleaseScript, wfSkipScript, wfCancelScript, fairWaitScript, fairDoneScript, fairPumpScript,
		fairBlockScript, fairWithdrawScript, wfSettleScript}
)

const defaultTimeline = 100

// Config configures a Store; the zero value of each field means its documented default.
type Config struct {
	// Retention is how long job records and timelines live after their last change (default 7 days).
	Retention time.Duration
	// TimelineCap is the most events kept per job; older ones are dropped (default 100).
	TimelineCap int
	// WorkerID names this process in timelines.
	WorkerID string
	// Durability is durable mode (zero: off): the promises' writes wait for replicas.
	Durability Durability
	// IndexStripes splits the indexes every job is written to into this many keys (stripes.go);
	// default 48 on a cluster client, 1 (unstriped) otherwise.
	IndexStripes int
}

func (c Config) withDefaults() Config {
	if c.Retention <= 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.TimelineCap <= 0 {
		c.TimelineCap = defaultTimeline
	}
	return c
}

// Store reads and writes jobs in Redis through one client.
type Store struct {
	rdb   redis.UniversalClient
	locks *locking.Client
	cfg   Config
	// clockOffset is Redis's clock minus this process's, in ns (SyncClock).
	clockOffset atomic.Int64
	// batch sends the runs' scripts (start, finish, limit take and release) in shared pipelines;
	// creates sends concurrent enqueues' creates in shared pipelines of their own (a burst of
	// enqueues does not hold up the runs' scripts).
	batch, creates *batcher
	// bulkLoaded: LoadBulkScripts loaded the bulk's scripts.
	bulkLoaded atomic.Bool
	// stripes is how many stripes the indexes have (stripes.go).
	stripes int
	// fairKeys caches FairKeys by FairShard: every fair wait, end and admission names fifteen keys,
	// and building them was 2% of a fair drain's CPU. A process knows a few types of at most 64
	// shards each (and their old layouts), so the map stays small.
	fairKeys sync.Map
}

// New returns a store on rdb whose keys are locks' (same prefix and hash tags).
func New(rdb redis.UniversalClient, locks *locking.Client, cfg Config) *Store {
	return &Store{rdb: rdb, locks: locks, cfg: cfg.withDefaults(), batch: newBatcher(rdb, cfg.Durability),
		creates: newBatcher(rdb, Durability{}), // a create promises nothing: the confirm does
		stripes: resolveStripes(rdb, cfg.IndexStripes)}
}

// Redis is the store's client.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

// Durability is the store's durable mode (zero: off).
func (s *Store) Durability() Durability { return s.cfg.Durability }

// Retention is how long records and timelines are kept after their last change.
func (s *Store) Retention() time.Duration { return s.cfg.Retention }

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return max(d.Milliseconds(), 1)
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
