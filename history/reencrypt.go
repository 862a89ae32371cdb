package history

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/engine"
)

// reencryptPage is how many rows one page of Reencrypt reads.
const reencryptPage = 200

// Reencrypt moves the copies' payloads, results and checkpoints onto the current key, as
// Stack.Reencrypt does in Redis: page by page in job id order, each row written with a
// compare-and-set on the record it read (a copy rewritten meanwhile, by a job that ended again,
// keeps its newer record). It can be stopped and run again; progress is called after each page.
func Reencrypt(ctx context.Context, db *pgxpool.Pool, stack *engine.Stack, progress func(engine.ReencryptStats)) (engine.ReencryptStats, error) {
	var st engine.ReencryptStats
	after := ""
	for {
		rows, err := db.Query(ctx, `SELECT job_id, type, record FROM jobguard_job_history WHERE job_id > $1 ORDER BY job_id LIMIT $2`, after, reencryptPage)
		if err != nil {
			return st, fmt.Errorf("history: re-encrypt: %w", err)
		}
		type row struct {
			id, typ string
			rec     []byte
		}
		var page []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.typ, &r.rec); err != nil {
				rows.Close()
				return st, fmt.Errorf("history: re-encrypt: %w", err)
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return st, fmt.Errorf("history: re-encrypt: %w", err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			st.Jobs++
			var raw map[string]string
			if err := json.Unmarshal(r.rec, &raw); err != nil {
				return st, fmt.Errorf("history: re-encrypt %s: %w", r.id, err)
			}
			rw, err := stack.Rewrites(r.id, r.typ, raw)
			if err != nil {
				st.Failed = append(st.Failed, r.id)
				continue
			}
			if len(rw) == 0 {
				continue
			}
			for _, w := range rw {
				raw[w.Field] = w.New
			}
			rec, err := json.Marshal(raw)
			if err != nil {
				return st, err
			}
			tag, err := db.Exec(ctx, `UPDATE jobguard_job_history SET record = $2 WHERE job_id = $1 AND record = $3::jsonb`, r.id, rec, r.rec)
			if err != nil {
				return st, fmt.Errorf("history: re-encrypt %s: %w", r.id, err)
			}
			if tag.RowsAffected() == 1 {
				st.Rewritten += len(rw)
			} else {
				st.Changed += len(rw)
			}
		}
		after = page[len(page)-1].id
		if progress != nil {
			progress(st)
		}
	}
	if len(st.Failed) > 0 {
		return st, fmt.Errorf("%w: %d copies", engine.ErrReencryptIncomplete, len(st.Failed))
	}
	return st, nil
}
