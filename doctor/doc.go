// Package doctor will check host state and the relay and explain what is wrong. Not built yet;
// see the README.
package doctor
