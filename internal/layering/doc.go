// Package layering has no code: its test checks that the module's imports point the way the
// package table in docs/development.md says (down the table, never up), so a wrong-way import
// fails the tests instead of creeping in.
package layering
