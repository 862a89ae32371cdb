package redistest

import "strings"

// addrsOf lists the servers' addresses, in order.
func addrsOf(servers []*Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// redisURL is a redis:// URL with addrs[0] as its host and every other address as an addr
// parameter after params (e.g. "master_name=mymaster"): what go-redis's cluster and failover URL
// parsers read, for REDIS_MODE=cluster and sentinel.
func redisURL(addrs []string, params ...string) string {
	for _, a := range addrs[1:] {
		params = append(params, "addr="+a)
	}
	u := "redis://" + addrs[0]
	if len(params) > 0 {
		u += "?" + strings.Join(params, "&")
	}
	return u
}
