package httpapi

import (
	"errors"
	"strings"
	"time"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/tasks"
)

// startByDetail is what a bad start_by is told.
const startByDetail = "start_by must be an RFC 3339 time in the future, e.g. 2026-12-03T10:00:00Z"

// tagsDetail is what bad tags are told (before what is wrong with them).
const tagsDetail = "tags must be an array of at most 8 strings of 1-64 characters of A-Z a-z 0-9 . _ : = -"

// jobFields are the members of an enqueue body that belong to the job, not to the task's
// request: start_by, the job's deadline (engine.Spec.StartBy), an RFC 3339 time (absolute rather
// than a duration: a request retried with the same Idempotency-Key means the same deadline, and
// its fingerprint, the body, says so); tags (engine.Spec.Tags), normalized.
type jobFields struct {
	StartBy time.Time `json:"start_by,omitzero"`
	Tags    []string  `json:"tags,omitempty" openapi:"ref=Tags"`
}

// acceptJobRequest is acceptRequest for the enqueue routes, whose body may also carry the job's
// own members (jobFields).
func acceptJobRequest(c *fiber.Ctx, empty tasks.Request) (tasks.Request, jobFields, error) {
	if err := requireJSON(c); err != nil {
		return nil, jobFields{}, err
	}
	body, jf, err := takeJobFields(c.Body(), time.Now())
	if err != nil {
		return nil, jobFields{}, err
	}
	req, err := acceptBody(c, body, empty)
	return req, jf, err
}

// takeJobFields splits start_by and tags off an enqueue body: the rest is the task's request. A
// body that is not one JSON object, or has neither, is returned as it is, for the strict decode to
// judge. What it returns owns its memory (the decoder copies), so it may outlive the request.
func takeJobFields(body []byte, now time.Time) ([]byte, jobFields, error) {
	var env struct {
		StartBy jsontext.Value `json:"start_by,omitzero"`
		Tags    jsontext.Value `json:"tags,omitzero"`
		Rest    jsontext.Value `json:",unknown"`
	}
	if json.Unmarshal(body, &env) != nil || (len(env.StartBy) == 0 && len(env.Tags) == 0) {
		return body, jobFields{}, nil
	}
	var jf jobFields
	if len(env.StartBy) > 0 {
		var raw string
		err := json.Unmarshal(env.StartBy, &raw)
		if err == nil {
			jf.StartBy, err = time.Parse(time.RFC3339, raw)
		}
		if err == nil && !jf.StartBy.After(now) {
			err = errors.New("in the past")
		}
		if err != nil {
			return nil, jobFields{}, problem.BadField("start_by", startByDetail)
		}
	}
	if len(env.Tags) > 0 {
		var tags []string
		if err := json.Unmarshal(env.Tags, &tags); err != nil {
			return nil, jobFields{}, problem.BadField("tags", tagsDetail)
		}
		if tags == nil {
			tags = []string{} // null: no tags
		}
		norm, err := engine.NormalizeTags(tags)
		if err != nil {
			return nil, jobFields{}, problem.BadField("tags", tagsDetail+" ("+tagsProblem(err)+")")
		}
		jf.Tags = norm
	}
	if len(env.Rest) == 0 {
		return []byte("{}"), jf, nil
	}
	return env.Rest, jf, nil
}

// tagsProblem is what NormalizeTags found, without the packages' prefixes.
func tagsProblem(err error) string {
	msg := err.Error()
	if _, rest, ok := strings.Cut(msg, engine.ErrBadTags.Error()+": "); ok {
		return rest
	}
	return msg
}
