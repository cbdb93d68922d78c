import PushStores
import APNSCore
import Crypto
import Foundation
import MockAPNS
import MockServerSupport
import PushPipeline
import Testing

@testable import APNSHTTP2

/// Live Activity broadcast channels through ``APNSHTTP2Client`` and the pipeline's sender and
/// channel manager, against the mock's broadcast and channel management endpoints over real
/// HTTP/2 and TLS.
@Suite("Broadcast channels against MockAPNS", .timeLimit(.minutes(2)))
struct BroadcastChannelClientTests {
    static let policy = RetryPolicy(maxAttempts: 3, initialBackoff: .milliseconds(1), loadShedding: .disabled)
    static let bundleID = "com.example.scores"

    static func command(_ action: ChannelCommand.Action, channelID: String? = nil, policy: Int? = nil) -> ChannelCommand {
        ChannelCommand(
            requestID: UUID().uuidString,
            action: action,
            topic: bundleID,
            messageStoragePolicy: policy,
            channelID: channelID
        )
    }

    static func broadcast(to channelID: String, payload: String = #"{"aps":{"event":"update","content-state":{}}}"#) -> APNSRequest {
        APNSRequest(
            channelID: channelID,
            bundleID: bundleID,
            priority: .conserveEnergy,
            requestID: UUID().uuidString.lowercased(),
            expiration: 0,
            payload: Array(payload.utf8)
        )
    }

    @Test func channelsAreCreatedReadListedAndDeletedAndBroadcastsReachOnlyKnownOnes() async throws {
        let credentials = ProviderTokenCredentials(keyID: "KEY1234567", teamID: "TEAM123456", privateKey: .init())
        var mock = MockAPNSConfiguration(providerKeys: [credentials.keyID: credentials.privateKey.publicKey], teamID: credentials.teamID)
        mock.returnsUniqueIDs = true
        mock.maximumChannelsPerApp = 2
        try await MockHarness.run(mock: mock, authentication: .token(credentials)) { harness in
            let manager = ChannelManager(client: harness.client, policy: Self.policy)
            let created = try await manager.perform(Self.command(.create, policy: 1))
            #expect(created.status == .ok)
            #expect(created.apnsStatus == 201)
            let channel = try #require(created.channelID)
            #expect(harness.server.channels(bundleID: Self.bundleID) == [channel])

            let read = try await manager.perform(Self.command(.read, channelID: channel))
            #expect(read.status == .ok)
            #expect(read.messageStoragePolicy == 1)

            let second = try await manager.perform(Self.command(.create))
            let third = try await manager.perform(Self.command(.create))
            #expect(third.status == .rejected)
            #expect(third.apnsStatus == 400)
            #expect(third.reason == "CannotCreateChannelConfig", "the mock's limit is two channels")
            let listed = try await manager.perform(Self.command(.list))
            #expect(listed.channelIDs == [channel, second.channelID].compactMap { $0 })

            let answer = try await harness.client.send(Self.broadcast(to: channel), environment: .production, deadline: .now + .seconds(10))
            #expect(answer.status == 200)
            #expect(answer.uniqueID?.count == 36)
            #expect(harness.server.broadcastCount(channelID: channel) == 1)
            let request = try #require(harness.server.receivedRequests().last)
            #expect(request.header(":path") == "/4/broadcasts/apps/\(Self.bundleID)")
            #expect(request.header("apns-priority") == "5")
            #expect(request.header("apns-topic") == nil, "the path names the app")
            #expect(answer.apnsID == request.header("apns-request-id"))

            let deleted = try await manager.perform(Self.command(.delete, channelID: channel))
            #expect(deleted.status == .ok)
            #expect(deleted.apnsStatus == 204)
            let gone = try await harness.client.send(Self.broadcast(to: channel), environment: .production, deadline: .now + .seconds(10))
            #expect(gone.status == 400)
            #expect(gone.reason == .channelNotRegistered)
            let readGone = try await manager.perform(Self.command(.read, channelID: channel))
            #expect(readGone.status == .rejected)
            #expect(readGone.reason == "ChannelNotRegistered")
        }
    }

    @Test func aCertificateCredentialSendsNoChannelRequest() async throws {
        let directory = try TemporaryDirectory()
        defer { directory.remove() }
        let files = try ClientCertificateFiles.generate(in: directory)
        let mock = MockAPNSConfiguration(clientCertificateAuthorityPath: files.caPath)
        let certificate = APNSClientConfiguration.Authentication.certificate(
            pemCertificatePath: files.certificatePath,
            pemPrivateKeyPath: files.privateKeyPath
        )
        try await MockHarness.run(mock: mock, authentication: certificate) { harness in
            await #expect(throws: APNSTokenAuthenticationRequiredError.self) {
                _ = try await harness.client.send(
                    Self.broadcast(to: "AAAAAAAAAAAAAAAAAAAAAA=="),
                    environment: .production,
                    deadline: .now + .seconds(10)
                )
            }
            let sender = RetryingSender(client: harness.client, policy: Self.policy)
            let outcome = try await sender.deliver(
                Self.broadcast(to: "AAAAAAAAAAAAAAAAAAAAAA=="),
                environment: .production,
                consumedAt: .now
            )
            #expect(outcome.status == .rejected)
            #expect(outcome.reason == "TokenAuthenticationRequired")
            #expect(outcome.attempts == 0)
            let manager = ChannelManager(client: harness.client, policy: Self.policy)
            let refused = try await manager.perform(Self.command(.create))
            #expect(refused.status == .rejected)
            #expect(refused.reason == "TokenAuthenticationRequired")
            #expect(harness.server.receivedRequests().isEmpty, "nothing was sent")
        }
    }
}
