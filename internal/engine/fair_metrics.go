package engine

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fairScrapeTimeout bounds the Redis reads of one scrape, so that a scrape with Redis stalled
// answers within it. The reads are a few bounded ones per type (top keys, not every key), a
// millisecond or two on a Redis that answers: no ping goes before them, which would be a
// round trip more per scrape (the template's own collector pings once already).
const fairScrapeTimeout = 500 * time.Millisecond

// fairCollector reads the admission layer's counts at each scrape (they live in Redis, shared by
// every process: any process's /metrics shows the same).
type fairCollector struct {
	s                                       *Stack
	backlog, running, admitted, keysWaiting *prometheus.Desc
	capacity                                *prometheus.Desc
}

func newFairCollector(s *Stack) *fairCollector {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("jobguard_fair_"+name, help, labels, nil)
	}
	return &fairCollector{s: s,
		backlog:     desc("key_backlog", "Jobs waiting in the admission layer for a key, top keys by backlog or running jobs only.", "type", "key"),
		running:     desc("key_admitted", "Jobs of a key admitted into asynq and not ended, top keys by backlog or running jobs only.", "type", "key"),
		admitted:    desc("admitted", "Jobs of a fairly dispatched type admitted into asynq and not ended (what its capacity bounds).", "type"),
		keysWaiting: desc("waiting_keys", "Keys with jobs waiting in the admission layer.", "type"),
		capacity: desc("capacity", "The most jobs of a fairly dispatched type admitted at once now: its Capacity, or the live "+
			"handlers that serve it.", "type"),
	}
}

func (c *fairCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.running
	ch <- c.admitted
	ch <- c.keysWaiting
	ch <- c.capacity
}

func (c *fairCollector) Collect(ch chan<- prometheus.Metric) {
	types := c.s.fairTypes()
	if len(types) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), fairScrapeTimeout)
	defer cancel()
	for _, tc := range types {
		// Key labels are the one exception to "no tenant id in a label": opt-in
		// (Config.FairMetricKeys), bounded whatever the number of keys.
		counts, err := c.s.fairCountsOf(ctx, tc, c.s.cfg.FairMetricKeys)
		if err != nil {
			if ctx.Err() != nil {
				return // Redis did not answer in time: the other types' reads would not either
			}
			continue // a scrape shows what it could read
		}
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.GaugeValue, float64(counts.Admitted), tc.Type)
		ch <- prometheus.MustNewConstMetric(c.keysWaiting, prometheus.GaugeValue, float64(counts.WaitingKeys), tc.Type)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(counts.Capacity), tc.Type)
		for _, k := range counts.TopKeys {
			ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(k.Backlog), tc.Type, k.Key)
			ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(k.Running), tc.Type, k.Key)
		}
	}
}
