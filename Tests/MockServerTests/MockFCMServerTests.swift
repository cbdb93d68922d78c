import Foundation
import JSONCore
import Logging
import MockFCM
import NIOHPACK
import Testing
import _CryptoExtras

/// The mock FCM on its own, through a plain HTTP/2 client (not Herald's): each answer as Google's
/// documents name it (the sources are beside each answer in MockFCMServer+Answer.swift), so the
/// FCM client's tests run against what FCM says, not against what the client expects.
@Suite("MockFCMServer", .timeLimit(.minutes(2)))
struct MockFCMServerTests {
    static let project = "demo-project"
    static let accessToken = "ya29.static-test-token"

    /// A mock with one service account, one static access token for `project`, and the tokens
    /// `unregistered` and `invalid` known as such.
    static func withServer<Result: Sendable>(
        faults: MockFCMFaults = .none,
        _ body: @Sendable (_ server: MockFCMServer, _ client: TestHTTP2Client) async throws -> Result
    ) async throws -> Result {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("mock-fcm-tests-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let caPath = directory.appendingPathComponent("ca.pem").path
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        var configuration = MockFCMConfiguration(
            caCertificatePath: caPath,
            serviceAccounts: [MockFCMServiceAccount(projectID: project, clientEmail: "sender@\(project).iam.example", publicKey: key.publicKey)],
            faults: faults
        )
        configuration.staticAccessTokens = [accessToken: project]
        configuration.unregisteredTokens = ["unregistered"]
        configuration.invalidTokens = ["invalid"]
        var logger = Logger(label: "mock-fcm-tests")
        logger.logLevel = .warning
        let server = MockFCMServer(configuration: configuration, logger: logger)
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await server.run() }
            defer { group.cancelAll() }
            let client = try await TestHTTP2Client.connect(port: try await server.listeningPort(), caPath: caPath, serverHostname: nil)
            let result = try await body(server, client)
            await client.close()
            return result
        }
    }

    static func send(_ client: TestHTTP2Client, token: String, bearer: String? = accessToken) async throws -> (TestResponse, JSONValue?) {
        var headers = [("content-type", "application/json")]
        if let bearer { headers.append(("authorization", "Bearer \(bearer)")) }
        let response = try await client.send(
            path: "/v1/projects/\(project)/messages:send",
            headers: headers,
            payload: Array(#"{"message":{"token":"\#(token)","data":{"k":"v"}}}"#.utf8)
        )
        return (response, try? JSONParser.parse(response.body))
    }

    @Test func aMessageToAKnownTokenIsDeliveredAndNamed() async throws {
        try await Self.withServer { server, client in
            let (response, body) = try await Self.send(client, token: "device-1")
            #expect(response.status == 200)
            #expect(body?["name"]?.stringValue?.hasPrefix("projects/\(Self.project)/messages/") == true)
            #expect(server.deliveredCount(token: "device-1") == 1)
        }
    }

    /// UNREGISTERED (404) and an invalid token (400 INVALID_ARGUMENT with the FcmError detail,
    /// no BadRequest), as Google answers them today.
    @Test func goneAndInvalidTokensGetGooglesErrorBodies() async throws {
        try await Self.withServer { server, client in
            let (gone, goneBody) = try await Self.send(client, token: "unregistered")
            #expect(gone.status == 404)
            #expect(goneBody?["error"]?["status"] == .string("NOT_FOUND"))
            #expect(Self.fcmErrorCode(goneBody) == "UNREGISTERED")

            let (invalid, invalidBody) = try await Self.send(client, token: "invalid")
            #expect(invalid.status == 400)
            #expect(invalidBody?["error"]?["status"] == .string("INVALID_ARGUMENT"))
            #expect(Self.fcmErrorCode(invalidBody) == "INVALID_ARGUMENT")
            #expect(server.deliveredCount(token: "unregistered") + server.deliveredCount(token: "invalid") == 0)
        }
    }

    @Test func aMissingOrUnknownBearerIsUnauthenticated() async throws {
        try await Self.withServer { server, client in
            let (missing, missingBody) = try await Self.send(client, token: "device-1", bearer: nil)
            #expect(missing.status == 401)
            #expect(missingBody?["error"]?["status"] == .string("UNAUTHENTICATED"))
            let (unknown, _) = try await Self.send(client, token: "device-1", bearer: "ya29.never-issued")
            #expect(unknown.status == 401)
            #expect(server.totalDelivered == 0)
        }
    }

    /// A spent quota: 429 QUOTA_EXCEEDED with Retry-After and a QuotaFailure detail.
    @Test func anExhaustedProjectQuotaAnswers429WithRetryAfter() async throws {
        try await Self.withServer { server, client in
            server.exhaustQuota(ofProject: Self.project, for: .seconds(30))
            let (response, body) = try await Self.send(client, token: "device-1")
            #expect(response.status == 429)
            #expect(Int(response.headers.first(name: "retry-after") ?? "") ?? 0 > 0)
            #expect(Self.fcmErrorCode(body) == "QUOTA_EXCEEDED")
            #expect(server.deliveredCount(token: "device-1") == 0)
        }
    }

    @Test func anyOtherPathGetsGooglesHTMLNotFound() async throws {
        try await Self.withServer { _, client in
            let response = try await client.send(method: "GET", path: "/v1/nothing", payload: [])
            #expect(response.status == 404)
            #expect(String(decoding: response.body, as: UTF8.self).contains("<title>Error 404 (Not Found)!!1</title>"))
        }
    }

    /// The `errorCode` of the answer's FcmError detail.
    static func fcmErrorCode(_ body: JSONValue?) -> String? {
        guard case .array(let details)? = body?["error"]?["details"] else { return nil }
        return details.lazy.compactMap { detail -> String? in
            guard detail["@type"]?.stringValue == "type.googleapis.com/google.firebase.fcm.v1.FcmError" else { return nil }
            return detail["errorCode"]?.stringValue
        }.first
    }
}
