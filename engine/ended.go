package engine

// OnEnd registers fn to be told the id of every job this process ends (done, failed, revoked,
// cancelled, already applied, exhausted, failed by the rescuer), after the end is written. fn runs on the
// delivery's goroutine and must not block: queue the id (history.Writer.Add does).
func (s *Stack) OnEnd(fn func(jobID string)) { s.onEnd.Store(&fn) }

// ended tells the OnEnd function, if any, that job id has ended.
func (s *Stack) ended(id string) {
	if fn := s.onEnd.Load(); fn != nil {
		(*fn)(id)
	}
}
