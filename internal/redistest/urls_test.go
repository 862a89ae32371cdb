package redistest

import "testing"

// The cluster and sentinel URLs name the first node as the host and every other one as an addr
// parameter, as go-redis's URL parsers read them.
func TestURLsNameEveryNode(t *testing.T) {
	t.Parallel()
	nodes := []*Server{{Addr: "127.0.0.1:1"}, {Addr: "127.0.0.1:2"}, {Addr: "127.0.0.1:3"}}
	for _, c := range []struct{ got, want string }{
		{(&Cluster{Nodes: nodes}).URL(), "redis://127.0.0.1:1?addr=127.0.0.1:2&addr=127.0.0.1:3"},
		{(&ReplicatedCluster{Nodes: nodes[:1]}).URL(), "redis://127.0.0.1:1"},
		{(&Replicated{Sentinels: []*Sentinel{{Addr: "127.0.0.1:4"}, {Addr: "127.0.0.1:5"}}}).URL(),
			"redis://127.0.0.1:4?master_name=mymaster&addr=127.0.0.1:5"},
	} {
		if c.got != c.want {
			t.Errorf("URL %q, want %q", c.got, c.want)
		}
	}
}
