import Foundation
import HeraldService
import PostgresNIO
import Testing

@Suite struct PostgresURLTests {
    @Test func libpqsTLSModesAreReadAndPreferIsTheDefault() throws {
        #expect(try PostgresURL("postgres://u:p@db:5433/herald").sslMode == .prefer)
        for mode in PostgresURL.SSLMode.allCases {
            #expect(try PostgresURL("postgres://u:p@db/herald?sslmode=\(mode.rawValue)").sslMode == mode)
        }
        let roots = FileManager.default.temporaryDirectory.appendingPathComponent("roots-\(UUID().uuidString).pem")
        try "-----BEGIN CERTIFICATE-----\n".write(to: roots, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: roots) }
        let verified = try PostgresURL("postgres://u:p@db/herald?sslmode=verify-full&sslrootcert=\(roots.path)")
        #expect(verified.sslMode == .verifyFull)
        #expect(verified.sslRootCertificatePath == roots.path)
    }

    @Test func anUnknownModeOrAnUnreadableRootFileIsNamed() {
        #expect {
            _ = try PostgresURL("postgres://u:p@db/herald?sslmode=verify")
        } throws: { "\($0)".contains("sslmode must be one of disable, prefer, require, verify-ca, verify-full") }
        #expect {
            _ = try PostgresURL("postgres://u:p@db/herald?sslmode=verify-ca&sslrootcert=/nonexistent/roots.pem")
        } throws: { "\($0)".contains("cannot read sslrootcert=/nonexistent/roots.pem") }
    }

    @Test func thePasswordNeverAppearsInTheDescription() throws {
        #expect(try PostgresURL("postgres://herald:s3cret@db:5432/push?sslmode=require").description == "postgres://herald@db:5432/push")
    }

    @Test func thePipelinesPoolKeepsItsSteadyConnectionsOpenWithoutTimers() throws {
        let url = try PostgresURL("postgres://herald@db/push")
        let pipeline = url.clientConfiguration(maximumConnections: 20, pipeline: true).options
        #expect(pipeline.minimumConnections == 4 && pipeline.maximumConnections == 20)
        #expect(pipeline.keepAliveBehavior == nil, "no keep-alive timer each time a connection goes back idle")
        #expect(url.clientConfiguration(maximumConnections: 2, pipeline: true).options.minimumConnections == 2)
        let housekeeping = url.clientConfiguration(maximumConnections: 2).options
        #expect(housekeeping.minimumConnections == 0 && housekeeping.keepAliveBehavior != nil, "postgres-nio's defaults")
    }
}
