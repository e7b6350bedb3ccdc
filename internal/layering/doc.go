// Package layering has no code: its test checks that the module's imports point the way
// docs/design.md and the README's package table say, so a wrong-way import fails the build's
// tests instead of creeping in.
package layering
