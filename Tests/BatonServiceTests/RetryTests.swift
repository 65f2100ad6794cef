import Baton
import BatonService
import Foundation
import TestSupport
import Testing

/// Issue 14 item 11: deadlocks, serialization failures and a connection lost mid-statement are retried once,
/// then answer 503, never 500.
@Suite("Retryable database errors", .serialized)
struct RetryTests {
    /// Makes the next `failures` rewrites of `public.users` fail with `sqlState` (a sequence counts them:
    /// `nextval` is not rolled back with the failing statement).
    private func failRewrites(_ f: ServiceFixture, times failures: Int, sqlState: String) throws {
        _ = try TestDatabase.psql(f.url, """
            CREATE SEQUENCE flaky;
            CREATE FUNCTION flaky() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('flaky') <= \(failures) THEN RAISE EXCEPTION 'injected' USING ERRCODE = '\(sqlState)'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER flaky BEFORE UPDATE ON public.users FOR EACH ROW EXECUTE FUNCTION flaky();
            """)
    }

    @Test("one deadlock or serialization failure: retried, the sign-in migrates", arguments: ["40P01", "40001"])
    func retriedOnce(sqlState: String) async throws {
        let f = try await ServiceFixture(.inProcess, people: 1)
        try failRewrites(f, times: 1, sqlState: sqlState)
        let reply = try await f.signIn(try f.token(f.people[0]))
        #expect(reply.status == 200, "\(reply.text)")
        #expect(reply.json["outcome"]?.stringValue == "migrated")
        #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        await f.close()
    }

    @Test("two in a row: 503 database_unavailable, nothing written", arguments: ["40P01", "40001"])
    func unavailableAfterRetry(sqlState: String) async throws {
        let f = try await ServiceFixture(.inProcess, people: 1)
        try failRewrites(f, times: 2, sqlState: sqlState)
        let reply = try await f.signIn(try f.token(f.people[0]))
        #expect(reply.status == 503, "\(reply.text)")
        #expect(reply.error == "database_unavailable")
        #expect(try f.count("SELECT count(*) FROM baton.events") == 0)
        await f.close()
    }

    @Test("the connection lost mid-statement once: retried on a new connection, the sign-in migrates")
    func connectionLostOnce() async throws {
        let f = try await ServiceFixture(.inProcess, people: 1)
        _ = try TestDatabase.psql(f.url, """
            CREATE SEQUENCE flaky;
            CREATE FUNCTION flaky() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF nextval('flaky') <= 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(5); END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER flaky BEFORE UPDATE ON public.users FOR EACH ROW EXECUTE FUNCTION flaky();
            """)
        let reply = try await f.signIn(try f.token(f.people[0]))
        #expect(reply.status == 200, "\(reply.text)")
        #expect(reply.json["outcome"]?.stringValue == "migrated")
        #expect(try f.count("SELECT count(*) FROM baton.events") == 1)
        await f.close()
    }
}
