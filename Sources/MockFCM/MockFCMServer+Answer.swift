import Crypto
import Foundation
import JSONCore
import MockServerSupport
import NIOCore
import Synchronization
import _CryptoExtras

extension MockFCMServer {
    /// The counters, issued tokens, scripts and log, behind the server's lock.
    struct Ledger {
        /// Issued access tokens: the project, the expiry, and the `kid` of the key that signed the
        /// assertion they were exchanged for (nil for a static token).
        var accessTokens: [String: (projectID: String, expiresAtMilliseconds: Int64, keyID: String?)] = [:]
        var tokenExchanges = 0
        /// Messages delivered with an access token, by the `kid` its assertion was signed with.
        var deliveredByKeyID: [String: Int] = [:]
        var refusedAssertions = 0
        var requestsByToken: [String: Int] = [:]
        var deliveredByToken: [String: Int] = [:]
        var totalDelivered = 0
        var countsByStatus: [Int: Int] = [:]
        var scripts: [String: [MockFCMScriptedFault]] = [:]
        /// Access tokens the metadata server's endpoint issued.
        var metadataTokensIssued = 0
        /// Until when (wall clock, ms) each project's quota is spent: every send answers 429.
        var quotaExhaustedUntil: [String: Int64] = [:]
        var unregisteredTokens: Set<String>
        var faults: MockFCMFaults
        var generator: SeededRandomNumberGenerator
        var log = CircularBuffer<ReceivedMessage>()
        var logLimit: Int
        var messageCounter: UInt64 = 0

        mutating func record(_ message: ReceivedMessage) {
            guard logLimit > 0 else { return }
            if log.count >= logLimit { log.removeFirst(log.count - logLimit + 1) }
            log.append(message)
        }
    }

    static let tokenPath = "/token"
    static let metadataTokenPath = "/computeMetadata/v1/instance/service-accounts/default/token"

    /// `GET /computeMetadata/v1/instance/service-accounts/default/token`: the metadata server's
    /// access token for the pod's service account, as GKE's Workload Identity serves it.
    /// Sources: https://cloud.google.com/compute/docs/access/authenticate-workloads (the
    /// `Metadata-Flavor: Google` header is required, else 403; the answer is `access_token`,
    /// `expires_in`, `token_type`); https://cloud.google.com/kubernetes-engine/docs/how-to/workload-identity.
    func metadataTokenAnswer(metadataFlavor: String?) -> MockFCMAnswer {
        guard let projectID = configuration.metadataServerProjectID else { return .htmlNotFound }
        guard metadataFlavor == "Google" else {
            return MockFCMAnswer(status: 403, body: "Missing required header: Metadata-Flavor", contentType: "text/plain", reason: "MissingMetadataFlavor")
        }
        let token = "ya29.metadata-" + UUID().uuidString
        let lifetime = configuration.accessTokenLifetimeSeconds
        ledger.withLock { ledger in
            ledger.metadataTokensIssued += 1
            ledger.accessTokens[token] = (projectID, configuration.wallClockMilliseconds() + Int64(lifetime) * 1000, nil)
        }
        return .success([.init("access_token", .string(token)), .init("expires_in", .number(String(lifetime))), .init("token_type", .string("Bearer"))])
    }
    static let fcmScope = "https://www.googleapis.com/auth/firebase.messaging"

    /// `POST /token`: verifies the RS256 assertion of a known service account and issues an
    /// access token, as Google's OAuth endpoint does for the JWT bearer grant.
    func tokenAnswer(body: [UInt8], authority: String?) -> MockFCMAnswer {
        func refused(_ description: String) -> MockFCMAnswer {
            ledger.withLock { $0.refusedAssertions += 1 }
            let text = #"{"error":"invalid_grant","error_description":"\#(description)"}"#
            return MockFCMAnswer(status: 400, body: text, reason: "invalid_grant")
        }
        let form = Self.formFields(String(decoding: body, as: UTF8.self))
        guard form["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer", let assertion = form["assertion"] else {
            return refused("Invalid grant_type or no assertion")
        }
        let parts = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.base64URLDecode(parts[0]), let claimsData = Self.base64URLDecode(parts[1]),
            let signature = Self.base64URLDecode(parts[2]),
            let header = (try? JSONSerialization.jsonObject(with: headerData)) as? [String: Any],
            let claims = (try? JSONSerialization.jsonObject(with: claimsData)) as? [String: Any]
        else { return refused("Malformed JWT") }
        guard header["alg"] as? String == "RS256" else { return refused("Invalid JWT algorithm") }
        guard let issuer = claims["iss"] as? String, configuration.serviceAccounts.contains(where: { $0.clientEmail == issuer })
        else { return refused("Invalid JWT: unknown issuer") }
        // An account may have several keys at once (a key being rotated): any of them signs.
        let signingInput = Data(parts[0].utf8) + Data(".".utf8) + Data(parts[1].utf8)
        guard
            let account = configuration.serviceAccounts.first(where: {
                $0.clientEmail == issuer
                    && $0.publicKey.isValidSignature(_RSA.Signing.RSASignature(rawRepresentation: signature), for: signingInput, padding: .insecurePKCS1v1_5)
            })
        else { return refused("Invalid JWT Signature.") }
        if let authority, claims["aud"] as? String != "https://\(authority)\(Self.tokenPath)" {
            return refused(
                "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.")
        }
        let scopes = (claims["scope"] as? String ?? "").split(separator: " ")
        guard scopes.contains(where: { $0 == Self.fcmScope }) else { return refused("Invalid OAuth scope") }
        let now = configuration.wallClockMilliseconds() / 1000
        guard let issuedAt = Self.integer(claims["iat"]), let expiresAt = Self.integer(claims["exp"]),
            expiresAt > now, issuedAt <= now + 60, expiresAt - issuedAt <= 3600
        else { return refused("Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe.") }

        let token = "ya29.mock-" + (0..<24).map { _ in String(UInt8.random(in: 0...15), radix: 16) }.joined()
        let lifetime = configuration.accessTokenLifetimeSeconds
        ledger.withLock { ledger in
            ledger.tokenExchanges += 1
            ledger.accessTokens[token] = (account.projectID, configuration.wallClockMilliseconds() + Int64(lifetime) * 1000, header["kid"] as? String)
        }
        return .success([.init("access_token", .string(token)), .init("expires_in", .number(String(lifetime))), .init("token_type", .string("Bearer"))])
    }

    /// `POST /v1/projects/{project}/messages:send`, in FCM's order: path, access token and
    /// project, the message, then faults and the token's registration.
    func sendAnswer(projectID: String, authorization: String?, document: JSONValue?) -> MockFCMAnswer {
        let now = configuration.wallClockMilliseconds()
        let bearer = authorization.flatMap { $0.hasPrefix("Bearer ") ? String($0.dropFirst(7)) : nil }
        let issuedToken = ledger.withLock { ledger -> (projectID: String, keyID: String?)? in
            guard let bearer, let issued = ledger.accessTokens[bearer], issued.expiresAtMilliseconds > now else { return nil }
            return (issued.projectID, issued.keyID)
        }
        guard let (tokenProject, keyID) = issuedToken else { return .unauthenticated }
        guard tokenProject == projectID else {
            return .rpcError(
                403, canonical: "PERMISSION_DENIED",
                message:
                    "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(projectID)' (or it may not exist)."
            )
        }
        guard !configuration.disabledProjects.contains(projectID) else {
            return .rpcError(
                403, canonical: "PERMISSION_DENIED", message: "Firebase Cloud Messaging API has not been used in project \(projectID) before or it is disabled."
            )
        }
        let checked: MessageCheck
        switch Self.check(document) {
        case .failure(let refusal): return refusal.answer
        case .success(let check): checked = check
        }
        let target = checked.target
        let script = ledger.withLock { ledger -> MockFCMScriptedFault? in
            ledger.requestsByToken[target, default: 0] += 1
            guard var queue = ledger.scripts[target], !queue.isEmpty else { return nil }
            let first = queue.removeFirst()
            ledger.scripts[target] = queue.isEmpty ? nil : queue
            return first
        }
        switch script {
        case .quotaExceeded(let seconds)?: return Self.quotaExceeded(retryAfterSeconds: seconds, projectID: projectID)
        case .deviceQuotaExceeded(let seconds)?: return Self.quotaExceeded(retryAfterSeconds: seconds, device: true)
        case .internalError?: return Self.internalError
        case .unavailable(let seconds)?: return Self.unavailable(retryAfterSeconds: seconds)
        case .expiredAccessToken?:
            _ = ledger.withLock { $0.accessTokens.removeValue(forKey: bearer ?? "") }
            return .unauthenticated
        case nil: break
        }
        if let until = ledger.withLock({ $0.quotaExhaustedUntil[projectID] }), now < until {
            return Self.quotaExceeded(retryAfterSeconds: Int((until - now + 999) / 1000), projectID: projectID)
        }
        if let fault = randomFault() { return fault }
        if configuration.invalidTokens.contains(target) { return Self.invalidToken }
        if configuration.legacyInvalidTokens.contains(target) {
            return .invalidArgument("message.\(checked.targetField)", Self.invalidTokenMessage)
        }
        // Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (SENDER_ID_MISMATCH, HTTP 403).
        if configuration.senderMismatchTokens.contains(target) {
            return .rpcError(403, canonical: "PERMISSION_DENIED", message: "SenderId mismatch", errorCode: "SENDER_ID_MISMATCH")
        }
        if configuration.thirdPartyAuthErrorTokens.contains(target) { return Self.thirdPartyAuthError(errorCode: "THIRD_PARTY_AUTH_ERROR") }
        if configuration.apnsAuthErrorTokens.contains(target) { return Self.thirdPartyAuthError(errorCode: "APNS_AUTH_ERROR") }
        if configuration.unknownErrorTokens.contains(target) { return Self.unknownError }
        return ledger.withLock { ledger in
            // Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (UNREGISTERED, HTTP 404).
            if ledger.unregisteredTokens.contains(target) {
                return .rpcError(404, canonical: "NOT_FOUND", message: "Requested entity was not found.", errorCode: "UNREGISTERED")
            }
            ledger.messageCounter += 1
            let name = "projects/\(projectID)/messages/0:\(now)%\(ledger.messageCounter)"
            if !checked.validateOnly {
                ledger.deliveredByToken[target, default: 0] += 1
                ledger.totalDelivered += 1
                if let keyID { ledger.deliveredByKeyID[keyID, default: 0] += 1 }
            }
            return .success([.init("name", .string(checked.validateOnly ? "projects/\(projectID)/messages/fake_message_id" : name))])
        }
    }

    static let invalidTokenMessage = "The registration token is not a valid FCM registration token"

    /// Google's answer to an invalid registration token today: the FcmError, no BadRequest.
    /// Source: https://firebase.google.com/docs/cloud-messaging/error-codes (example 2), as in firebase-admin-java issue #1064.
    static let invalidToken = MockFCMAnswer.rpcError(400, canonical: "INVALID_ARGUMENT", message: invalidTokenMessage, errorCode: "INVALID_ARGUMENT")

    /// 401 for an app whose APNs or web push credential Firebase holds is refused, with
    /// `errorCode` THIRD_PARTY_AUTH_ERROR or its older name APNS_AUTH_ERROR.
    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (THIRD_PARTY_AUTH_ERROR, HTTP 401).
    /// Source: firebase-admin-go messaging/messaging_errors.go and firebase-admin-python firebase_admin/messaging.py (APNS_AUTH_ERROR).
    static func thirdPartyAuthError(errorCode: String) -> MockFCMAnswer {
        .rpcError(401, canonical: "UNAUTHENTICATED", message: "Auth error from APNS or Web Push Service", errorCode: errorCode)
    }

    /// 500 with the canonical status UNKNOWN and no FcmError.
    /// Source: https://github.com/googleapis/googleapis/blob/master/google/rpc/code.proto (UNKNOWN, HTTP mapping 500).
    static let unknownError = MockFCMAnswer.rpcError(500, canonical: "UNKNOWN", message: "Unknown Error.")

    /// 429 QUOTA_EXCEEDED with a QuotaFailure naming the project's quota or the device's.
    /// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (QUOTA_EXCEEDED,
    /// HTTP 429: the message rate quota of the project, or the device message rate quota);
    /// https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas (per-project
    /// per-minute quota, per-device limits); https://github.com/googleapis/googleapis/blob/master/google/rpc/error_details.proto
    /// (QuotaFailure: `violations[{subject, description}]`, subject such as "project:<id>").
    static func quotaExceeded(retryAfterSeconds: Int?, device: Bool = false, projectID: String = "") -> MockFCMAnswer {
        .rpcError(
            429, canonical: "RESOURCE_EXHAUSTED", message: "Quota exceeded.", errorCode: "QUOTA_EXCEEDED",
            quotaViolations: device
                ? [("device", "Device message rate exceeded.")]
                : [("project:\(projectID)", "Message rate quota of the project exceeded.")],
            retryAfterSeconds: retryAfterSeconds
        )
    }

    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (INTERNAL, HTTP 500).
    static let internalError = MockFCMAnswer.rpcError(500, canonical: "INTERNAL", message: "Internal error encountered.", errorCode: "INTERNAL")

    /// Source: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode (UNAVAILABLE, HTTP 503).
    static func unavailable(retryAfterSeconds: Int?) -> MockFCMAnswer {
        .rpcError(
            503, canonical: "UNAVAILABLE", message: "The service is currently unavailable.", errorCode: "UNAVAILABLE", retryAfterSeconds: retryAfterSeconds)
    }

    /// One of the configured random faults, or nil.
    private func randomFault() -> MockFCMAnswer? {
        ledger.withLock { ledger -> MockFCMAnswer? in
            let faults = ledger.faults
            let total = faults.quotaExceededFraction + faults.internalErrorFraction + faults.unavailableFraction
            guard total > 0 else { return nil }
            let draw = ledger.generator.nextUnitInterval()
            if draw < faults.quotaExceededFraction { return Self.quotaExceeded(retryAfterSeconds: faults.retryAfterSeconds) }
            if draw < faults.quotaExceededFraction + faults.internalErrorFraction { return Self.internalError }
            if draw < total { return Self.unavailable(retryAfterSeconds: faults.retryAfterSeconds) }
            return nil
        }
    }

    /// `application/x-www-form-urlencoded` fields.
    static func formFields(_ text: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let decode = { (part: Substring) in part.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(part) }
            fields[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return fields
    }

    /// A JSON integer as JSONSerialization hands it over (Int or NSNumber by platform).
    static func integer(_ value: Any?) -> Int64? {
        if let value = value as? Int { return Int64(value) }
        if let value = value as? Int64 { return value }
        if let value = value as? NSNumber { return value.int64Value }
        return nil
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}
