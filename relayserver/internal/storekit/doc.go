// Package storekit holds what the relay's SQL stores (sqlitestore and pgstore) share: the queue
// of write units in front of their group-committing writers, the conversions between Go values
// and columns, and the decoding of rows whose shape both schemas have.
//
// It holds no SQL: each store keeps its own statements, dialect and transaction handling.
package storekit
