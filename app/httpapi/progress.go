package httpapi

// progressView is the job view's progress: what the handler last reported (Job.Progress), 0-100.
type progressView struct {
	Progress     int    `json:"progress" openapi:"min=0,max=100"`
	ProgressNote string `json:"progress_note,omitempty"`
}
