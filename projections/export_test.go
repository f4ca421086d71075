package projections

import (
	"context"
	"io/fs"

	"github.com/jmoiron/sqlx"
)

// Migrations are the embedded migrations, for a test to make a later
// release's from.
func Migrations() fs.FS { return migrations }

// MigrateFrom is Migrate with a test's migrations.
func MigrateFrom(ctx context.Context, db *sqlx.DB, fsys fs.FS) error { return migrate(ctx, db, fsys) }

// WithMigrations makes cfg's rebuild create its read model by a test's
// migrations.
func WithMigrations(cfg RebuildConfig, fsys fs.FS) RebuildConfig {
	cfg.migrations = fsys
	return cfg
}
