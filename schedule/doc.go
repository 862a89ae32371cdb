// Package schedule runs periodic jobs once per tick however many processes run it. Every worker
// may run a Scheduler; one at a time leads, holding the scheduler lease (locking, fenced, renewed
// by a keeper). The leader creates each tick's job with an id derived from the schedule's name and
// the tick's time, so a second leader (an old one that was paused past its lease) creating the
// same tick gets engine.ErrJobExists: each tick's job exists once. Each schedule's cursor (the last
// tick dealt with), last job and pause flag live in a small hash of their own, written fenced by
// the leader's token, so a new leader knows what was missed and an old one cannot move it back.
//
// Guaranteed: at most one job per tick, whatever leaders do. Every tick gets its job or is
// counted (skipped by overlap, missed by the catch-up policy, paused), provided some leader runs
// within Config.Grace of it; a tick older than Grace when a leader first looks at it is a missed
// tick, and the schedule's catch-up policy decides. Not guaranteed: an old leader paused past
// its lease may still create a tick the new leader skipped (overlap, catch-up); it never creates
// a second job for a tick.
//
// The package knows the engine and locking only; task types reach it through Config.Build.
package schedule
