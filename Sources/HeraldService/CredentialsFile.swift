package import APNSHTTP2
import APNSCore
import Foundation

/// Reads the file named by HERALD_CREDENTIALS_FILE: APNs credentials for particular apps, so
/// one Herald serves several apps and teams. Topics not listed use the HERALD_APNS_* credentials.
///
/// The file is a JSON array; each entry names its apps' bundle IDs and one credential:
/// ```json
/// [
///   { "topics": ["com.example.shop", "com.example.shop.watchkitapp"],
///     "key_path": "keys/AuthKey_ABC123DEFG.p8", "key_id": "ABC123DEFG", "team_id": "TEAM123456" },
///   { "topics": ["com.other.app"], "cert_path": "certs/other.p12", "cert_password": "…" },
///   { "topics": ["com.third.app"], "cert_path": "certs/third.pem", "cert_key_path": "certs/third-key.pem" }
/// ]
/// ```
/// - `topics`: bundle IDs (the event's `topic`); the push-type suffixes (`.voip`, …) are covered.
/// - Token authentication: `key_path` (a `.p8` ES256 key), `key_id`, `team_id`.
/// - Certificate authentication: `cert_path`, a PKCS#12 bundle with optional `cert_password`, or a
///   PEM certificate with its key in `cert_key_path` (or in the same PEM file).
///
/// FCM entries (`"platform": "fcm"`) sit beside them: the Android packages a Google
/// service-account key file serves (``fcmEntries(path:)``):
/// ```json
///   { "platform": "fcm", "packages": ["com.example.shop"], "service_account_path": "keys/shop-firebase.json" }
/// ```
/// and web push entries (`"platform": "webpush"`): the web apps a VAPID key pair serves, its
/// contact, and the keys it replaced that older subscriptions still name (``webPushEntries(path:)``):
/// ```json
///   { "platform": "webpush", "apps": ["shop-web"], "vapid_key_path": "keys/shop-vapid.pem",
///     "subject": "mailto:ops@example.com", "previous_vapid_key_paths": ["keys/shop-vapid-2025.pem"] }
/// ```
///
/// Relative paths are relative to the file's directory. Errors name the entry and the field,
/// never a password or key material.
package enum CredentialsFile {
    /// Loads the file at `path`; throws ``ConfigurationError`` naming the problem.
    package static func load(path: String) throws -> [String: APNSClientConfiguration.Authentication] {
        try loadReportingCertificates(path: path).credentials
    }

    /// Loads the file at `path`, and reads its certificates: what is wrong with them (expired or
    /// expiring within 30 days, or not issued for a bundle ID the entry lists) and the earliest
    /// expiry.
    static func loadReportingCertificates(path: String) throws -> (
        credentials: [String: APNSClientConfiguration.Authentication], certificates: CertificateReport
    ) {
        let (data, directory) = try read(path)
        var certificates = CertificateReport()
        let credentials = try parse(data, relativeTo: directory, fileName: path, certificates: &certificates)
        return (credentials, certificates)
    }

    /// The file's bytes and the directory its relative paths start from.
    static func read(_ path: String) throws -> (data: Data, directory: String) {
        do {
            return (try Data(contentsOf: URL(fileURLWithPath: path)), URL(fileURLWithPath: path).deletingLastPathComponent().path)
        } catch {
            throw ConfigurationError("cannot read HERALD_CREDENTIALS_FILE=\(path)")
        }
    }

    /// One entry as written in the file.
    struct Entry: Decodable {
        /// `apns` (the default), `fcm` or `webpush`.
        var platform: String?
        var topics: [String]?
        var packages: [String]?
        var serviceAccountPath: String?
        var apps: [String]?
        var vapidKeyPath: String?
        var previousVAPIDKeyPaths: [String]?
        var subject: String?
        var keyPath: String?
        var keyID: String?
        var teamID: String?
        var certPath: String?
        var certPassword: String?
        var certKeyPath: String?

        enum CodingKeys: String, CodingKey {
            case platform
            case topics
            case packages
            case serviceAccountPath = "service_account_path"
            case apps
            case vapidKeyPath = "vapid_key_path"
            case previousVAPIDKeyPaths = "previous_vapid_key_paths"
            case subject
            case keyPath = "key_path"
            case keyID = "key_id"
            case teamID = "team_id"
            case certPath = "cert_path"
            case certPassword = "cert_password"
            case certKeyPath = "cert_key_path"
        }
    }

    static func parse(
        _ data: Data,
        relativeTo directory: String,
        fileName: String,
        certificates: inout CertificateReport
    ) throws -> [String: APNSClientConfiguration.Authentication] {
        let entries = try decodeEntries(data, fileName: fileName)
        var credentials: [String: APNSClientConfiguration.Authentication] = [:]
        for (index, entry) in entries.enumerated() where entry.platform != "fcm" && entry.platform != "webpush" {
            let place = "HERALD_CREDENTIALS_FILE=\(fileName) entry \(index + 1)"
            guard entry.platform == nil || entry.platform == "apns" else {
                throw ConfigurationError("\(place): \"platform\" must be \"apns\", \"fcm\" or \"webpush\"")
            }
            guard entry.packages == nil, entry.serviceAccountPath == nil else {
                throw ConfigurationError("\(place): packages and service_account_path belong to an FCM entry (\"platform\": \"fcm\")")
            }
            guard entry.apps == nil, entry.vapidKeyPath == nil, entry.previousVAPIDKeyPaths == nil, entry.subject == nil else {
                throw ConfigurationError("\(place): apps, vapid_key_path and subject belong to a web push entry (\"platform\": \"webpush\")")
            }
            guard let topics = entry.topics, !topics.isEmpty else {
                throw ConfigurationError("\(place): \"topics\" must list at least one bundle ID")
            }
            let authentication = try self.authentication(of: entry, place: place, directory: directory)
            if let certPath = entry.certPath {
                certificates.check(
                    path: resolve(certPath, in: directory),
                    password: entry.certPassword,
                    name: "\(place): the certificate",
                    servedTopics: topics
                )
            }
            for topic in topics {
                guard (1...255).contains(topic.utf8.count), !topic.contains("\0") else {
                    throw ConfigurationError("\(place): the topic \"\(topic)\" must be 1 to 255 bytes")
                }
                guard credentials.updateValue(authentication, forKey: topic) == nil else {
                    throw ConfigurationError("\(place): the topic \(topic) is listed twice in the file")
                }
            }
        }
        return credentials
    }

    /// The file's entries, both platforms; throws when it is not a JSON array of entries.
    static func decodeEntries(_ data: Data, fileName: String) throws -> [Entry] {
        do {
            return try JSONDecoder().decode([Entry].self, from: data)
        } catch {
            throw ConfigurationError(
                "HERALD_CREDENTIALS_FILE=\(fileName) must be a JSON array of credential entries"
                    + " ({\"topics\": [...], \"key_path\" or \"cert_path\", ...}"
                    + " or {\"platform\": \"fcm\", \"packages\": [...], \"service_account_path\": ...}"
                    + " or {\"platform\": \"webpush\", \"apps\": [...], \"vapid_key_path\": ..., \"subject\": ...})"
            )
        }
    }

    private static func authentication(
        of entry: Entry,
        place: String,
        directory: String
    ) throws -> APNSClientConfiguration.Authentication {
        switch (entry.keyPath, entry.certPath) {
        case (let keyPath?, nil):
            guard entry.certPassword == nil, entry.certKeyPath == nil else {
                throw ConfigurationError("\(place): a token entry (key_path) takes no cert_password or cert_key_path")
            }
            guard let keyID = entry.keyID, !keyID.isEmpty, let teamID = entry.teamID, !teamID.isEmpty else {
                throw ConfigurationError("\(place): key_path needs key_id and team_id")
            }
            return try tokenCredential(
                keyPath: resolve(keyPath, in: directory),
                keyID: keyID,
                teamID: teamID,
                names: (key: "\(place): key_path", keyID: "\(place): key_id", teamID: "\(place): team_id")
            )
        case (nil, let certPath?):
            guard entry.keyID == nil, entry.teamID == nil else {
                throw ConfigurationError("\(place): a certificate entry (cert_path) takes no key_id or team_id")
            }
            return try certificateCredential(
                path: resolve(certPath, in: directory),
                keyPath: entry.certKeyPath.map { resolve($0, in: directory) },
                password: entry.certPassword,
                names: (certificate: "\(place): cert_path", key: "\(place): cert_key_path")
            )
        case (nil, nil):
            throw ConfigurationError("\(place): give key_path (token) or cert_path (certificate)")
        case (.some, .some):
            throw ConfigurationError("\(place): give key_path or cert_path, not both")
        }
    }

    /// A token credential from a `.p8` key; `names` say where each value came from in errors.
    /// Key and team IDs must have Apple's form (10 letters or digits) before they go into a JWT.
    static func tokenCredential(
        keyPath: String,
        keyID: String,
        teamID: String,
        names: (key: String, keyID: String, teamID: String)
    ) throws -> APNSClientConfiguration.Authentication {
        guard let pem = try? String(contentsOfFile: keyPath, encoding: .utf8) else {
            throw ConfigurationError("cannot read \(names.key)=\(keyPath)")
        }
        let credentials: ProviderTokenCredentials
        do {
            credentials = try ProviderTokenCredentials(keyID: keyID, teamID: teamID, p8PEM: pem)
        } catch {
            throw ConfigurationError("\(names.key)=\(keyPath) is not a PKCS#8 P-256 (.p8) key")
        }
        for (name, value) in [(names.keyID, keyID), (names.teamID, teamID)] where !isAppleIdentifier(value) {
            throw ConfigurationError("\(name)=\(value) must be Apple's 10-character ID (letters A-Z and digits)")
        }
        return .token(credentials)
    }

    /// A certificate credential: a PEM certificate with its key in `keyPath` (or in the same
    /// file), or a PKCS#12 bundle with an optional password.
    static func certificateCredential(
        path: String,
        keyPath: String?,
        password: String?,
        names: (certificate: String, key: String)
    ) throws -> APNSClientConfiguration.Authentication {
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ConfigurationError("cannot read \(names.certificate)=\(path)")
        }
        if let keyPath {
            guard FileManager.default.isReadableFile(atPath: keyPath) else {
                throw ConfigurationError("cannot read \(names.key)=\(keyPath)")
            }
            return .certificate(pemCertificatePath: path, pemPrivateKeyPath: keyPath)
        }
        if isPEM(path) {
            // A PEM file holding both the certificate and its key.
            return .certificate(pemCertificatePath: path, pemPrivateKeyPath: path)
        }
        return .certificate(pkcs12Path: path, password: password)
    }

    /// What reading APNs client certificates found: what to report (expiry, missing topics, or
    /// that one could not be read), and the earliest expiry of those read.
    struct CertificateReport {
        var problems: [String] = []
        /// In whole seconds since 1970.
        var earliestExpiry: Int64?

        /// Reads the certificate at `path` serving `servedTopics` (none when unknown).
        mutating func check(path: String, password: String?, name: String, servedTopics: [String]) {
            do {
                let facts = try APNSCertificateFacts(path: path, pem: isPEM(path), password: password)
                problems += facts.problems(named: name, servedTopics: servedTopics)
                earliestExpiry = min(earliestExpiry ?? facts.expirySeconds, facts.expirySeconds)
            } catch {
                problems.append("\(name) could not be read to check its expiry and topics: \(error)")
            }
        }
    }

    /// Apple's key and team IDs: 10 characters, uppercase letters and digits.
    static func isAppleIdentifier(_ text: String) -> Bool {
        text.utf8.count == 10
            && text.utf8.allSatisfy { (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains($0) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
    }

    static func resolve(_ path: String, in directory: String) -> String {
        path.hasPrefix("/") ? path : URL(fileURLWithPath: directory).appendingPathComponent(path).path
    }

    /// PEM files are text starting (after optional whitespace) with `-----BEGIN`; PKCS#12 is DER.
    private static func isPEM(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 256)) ?? Data()
        return String(decoding: head, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            .hasPrefix("-----BEGIN")
    }
}
