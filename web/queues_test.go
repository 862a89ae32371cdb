package web_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/testsupport"
)

// The logical queues page shows a queue sharded as "work", "work~3" and "work~12" as one row, its
// counts summed, its shards in order below it with links to asynqmon's page of each; a queue
// whose name only looks like a shard ("odd~x") is a logical queue of its own. asynqmon's page,
// which lists every shard as a queue, links to it (its banner).
func TestLogicalQueuesPageSumsShards(t *testing.T) {
	t.Parallel()
	b := startApp(t, nil)
	for q, n := range map[string]int{"work": 1, "work~12": 3, "work~3": 2, "odd~x": 1} {
		for range n {
			if _, err := b.plain.Enqueue(asynq.NewTask("shard-probe", nil), asynq.Queue(q), asynq.ProcessIn(time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var page string
	testsupport.Eventually(t, 10*time.Second, "the page lists the work queue", func() bool {
		var code int
		code, page = b.do(t, http.MethodGet, "/monitoring/logical-queues", "")
		return code == http.StatusOK && strings.Contains(page, `data-queue="work"`)
	})
	row := regexp.MustCompile(`(?s)<tr class="group" data-queue="work">.*?</tr>\n</table></details></td><td class="shard-count">(\d+)</td>\n` +
		`<td class="size">(\d+)</td>.*?<td class="scheduled">(\d+)</td>`).FindStringSubmatch(page)
	if row == nil || row[1] != "3" || row[2] != "6" || row[3] != "6" {
		t.Fatalf("work's row %q, want 3 shards and 6 scheduled in all:\n%s", row, page)
	}
	shards := regexp.MustCompile(`data-shard="([^"]+)"><td><a href="/monitoring/queues/([^"]+)">`).FindAllStringSubmatch(page, -1)
	var names []string
	for _, s := range shards {
		if s[1] != s[2] {
			t.Fatalf("shard %s links to %s", s[1], s[2])
		}
		names = append(names, s[1])
	}
	if got := strings.Join(names, " "); got != "work work~3 work~12" {
		t.Fatalf("shards listed %q, want work work~3 work~12", got)
	}
	if !strings.Contains(page, `data-queue="odd~x"`) {
		t.Fatalf("odd~x is not a logical queue of its own:\n%s", page)
	}
	if _, ui := b.do(t, http.MethodGet, "/monitoring/", ""); !strings.Contains(ui, `href="/monitoring/logical-queues"`) {
		t.Fatalf("asynqmon's page does not link to the logical queues:\n%.3000s", ui)
	}
}
