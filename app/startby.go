package app

import (
	"errors"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/tasks"
)

// startByDetail is what a bad start_by is told.
const startByDetail = "start_by must be an RFC 3339 time in the future, e.g. 2026-12-03T10:00:00Z"

// acceptJobRequest is acceptRequest for the enqueue routes, whose body may also carry start_by:
// the job's deadline (engine.Spec.StartBy), an RFC 3339 time, a member of the job's and not of
// the task's request. An absolute time rather than a duration: a request retried with the same
// Idempotency-Key means the same deadline, and its fingerprint (the body) says so.
func acceptJobRequest(c *fiber.Ctx, empty tasks.Request) (tasks.Request, time.Time, error) {
	if err := requireJSON(c); err != nil {
		return nil, time.Time{}, err
	}
	body, startBy, err := takeStartBy(c.Body(), time.Now())
	if err != nil {
		return nil, time.Time{}, err
	}
	req, err := acceptBody(c, body, empty)
	return req, startBy, err
}

// takeStartBy splits start_by off an enqueue body: the rest is the task's request. A body that is
// not one JSON object, or has no start_by, is returned as it is, for the strict decode to judge.
func takeStartBy(body []byte, now time.Time) ([]byte, time.Time, error) {
	var env struct {
		StartBy jsontext.Value `json:"start_by,omitzero"`
		Rest    jsontext.Value `json:",unknown"`
	}
	if json.Unmarshal(body, &env) != nil || len(env.StartBy) == 0 {
		return body, time.Time{}, nil
	}
	var raw string
	err := json.Unmarshal(env.StartBy, &raw)
	t := time.Time{}
	if err == nil {
		t, err = time.Parse(time.RFC3339, raw)
	}
	if err == nil && !t.After(now) {
		err = errors.New("in the past")
	}
	if err != nil {
		return nil, time.Time{}, BadField("start_by", startByDetail)
	}
	if len(env.Rest) == 0 {
		return []byte("{}"), t, nil
	}
	return env.Rest, t, nil
}
