package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/problem"
)

// POST /jobs/{id}/cancel: another tenant's job is 404, the owner's queued job is cancelled (its
// delivery deleted, the timeline says who and why), a second cancel is 409 problem+json, and the
// same order can then be submitted again (its dedup marker was released).
func TestCancelEndpoint(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the job stays queued
	order := `{"tenant_id":"t1","order_id":"o-1","sku":"s-1","quantity":2}`
	resp, body := post(t, r, "/jobs/reserve-stock", order, bearer(tokenA)...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	resp, body = post(t, r, "/jobs/"+a.JobID+"/cancel", "", bearer(tokenB)...)
	if p := decodeProblem(t, resp, body); p.Status != 404 {
		t.Fatalf("another tenant's cancel: %+v", p)
	}
	resp, body = post(t, r, "/jobs/"+a.JobID+"/cancel", `{"reason":"customer called"}`, append(bearer(tokenA), "Content-Type", "application/json")...)
	var c cancelAnswer
	if err := json.Unmarshal([]byte(body), &c); err != nil || resp.StatusCode != 200 ||
		c.Status != "cancelled" || c.Was != "queued" || !c.DeliveryDeleted {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	v := waitJob(t, r, a.JobID, "cancelled", bearer(tokenA)...)
	last := v.Timeline[len(v.Timeline)-1]
	if last.Event != "cancelled" || !strings.Contains(last.Detail, "tenant t1") || !strings.Contains(last.Detail, "customer called") ||
		v.LastError != "customer called" || v.FinishedAt == nil {
		t.Fatalf("view after cancel: %+v", v)
	}
	resp, body = post(t, r, "/jobs/"+a.JobID+"/cancel", "", bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != 409 || p.Code != problem.CodeJobEnded || !strings.Contains(p.Detail, "has ended") {
		t.Fatalf("cancel of a cancelled job: %+v", p)
	}
	resp, body = post(t, r, "/jobs/"+a.JobID+"/cancel", `{"reason":"`+strings.Repeat("x", 201)+`"}`, bearer(tokenA)...)
	if p := decodeProblem(t, resp, body); p.Status != 400 || p.Field != "reason" {
		t.Fatalf("long reason: %+v", p)
	}
	for _, id := range []string{"nope", "0123456789abcdef-00000000000000000000000000ff"} {
		resp, body = post(t, r, "/jobs/"+id+"/cancel", "", bearer(tokenA)...)
		if p := decodeProblem(t, resp, body); p.Status != 404 {
			t.Fatalf("cancel of %s: %+v", id, p)
		}
	}
	resp, body = post(t, r, "/jobs/reserve-stock", order, bearer(tokenA)...)
	var again jobAnswer
	if err := json.Unmarshal([]byte(body), &again); err != nil || resp.StatusCode != 202 || again.Deduplicated || again.JobID == a.JobID {
		t.Fatalf("the same order after the cancel: %d %s", resp.StatusCode, body)
	}
}
