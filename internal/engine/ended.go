package engine

// OnEnd registers fn to be told the id of every job this process ends (done, failed, revoked,
// cancelled, already applied, exhausted, failed by the rescuer), after the end is written, and
// again when this process's late answer for a job is refused (stale or invalid): the refusal is
// an event on the timeline, maybe after the job's end, so a copy of the ended job must be taken
// again. The job may not have ended then (a newer run owns it): fn checks. fn runs on the
// delivery's goroutine and must not block: queue the id (history.Writer.Add does).
func (s *Stack) OnEnd(fn func(jobID string)) { s.onEnd.Store(&fn) }

// ended tells the OnEnd function, if any, that job id has ended.
func (s *Stack) ended(id string) {
	if fn := s.onEnd.Load(); fn != nil {
		(*fn)(id)
	}
}
