package projections

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// statement is a SQL statement to prepare into dst.
type statement struct {
	dst **sqlx.Stmt
	sql string
}

// prepare prepares each statement once, at start: projectors and their
// batches then run on prepared statements only.
func prepare(ctx context.Context, db *sqlx.DB, what string, stmts []statement) error {
	for _, s := range stmts {
		stmt, err := db.PreparexContext(ctx, s.sql)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", what, err)
		}
		*s.dst = stmt
	}
	return nil
}
