// Package query answers reads from the PostgreSQL read models with prepared
// statements, and owns the DTOs of the public API's responses. It never
// writes: the read models belong to their projectors.
package query
