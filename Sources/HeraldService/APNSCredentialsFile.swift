public import APNSHTTP2
import APNSCore
import Foundation

/// Reads the file named by HERALD_APNS_CREDENTIALS_FILE: APNs credentials for particular apps, so
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
/// Relative paths are relative to the file's directory. Errors name the entry and the field,
/// never a password or key material.
public enum APNSCredentialsFile {
    /// Loads the file at `path`; throws ``ConfigurationError`` naming the problem.
    public static func load(path: String) throws -> [String: APNSClientConfiguration.Authentication] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ConfigurationError("cannot read HERALD_APNS_CREDENTIALS_FILE=\(path)")
        }
        let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
        return try parse(data, relativeTo: directory, fileName: path)
    }

    /// One entry as written in the file.
    private struct Entry: Decodable {
        var topics: [String]?
        var keyPath: String?
        var keyID: String?
        var teamID: String?
        var certPath: String?
        var certPassword: String?
        var certKeyPath: String?

        enum CodingKeys: String, CodingKey {
            case topics
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
        fileName: String
    ) throws -> [String: APNSClientConfiguration.Authentication] {
        let entries: [Entry]
        do {
            entries = try JSONDecoder().decode([Entry].self, from: data)
        } catch {
            throw ConfigurationError(
                "HERALD_APNS_CREDENTIALS_FILE=\(fileName) must be a JSON array of credential entries"
                    + " ({\"topics\": [...], \"key_path\" or \"cert_path\", ...})"
            )
        }
        var credentials: [String: APNSClientConfiguration.Authentication] = [:]
        for (index, entry) in entries.enumerated() {
            let place = "HERALD_APNS_CREDENTIALS_FILE=\(fileName) entry \(index + 1)"
            guard let topics = entry.topics, !topics.isEmpty else {
                throw ConfigurationError("\(place): \"topics\" must list at least one bundle ID")
            }
            let authentication = try self.authentication(of: entry, place: place, directory: directory)
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
            let path = resolve(keyPath, in: directory)
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw ConfigurationError("\(place): cannot read the key_path \(path)")
            }
            do {
                return .token(try ProviderTokenCredentials(keyID: keyID, teamID: teamID, p8PEM: pem))
            } catch {
                throw ConfigurationError("\(place): key_path \(path) is not a PKCS#8 P-256 (.p8) key")
            }
        case (nil, let certPath?):
            guard entry.keyID == nil, entry.teamID == nil else {
                throw ConfigurationError("\(place): a certificate entry (cert_path) takes no key_id or team_id")
            }
            let path = resolve(certPath, in: directory)
            guard FileManager.default.isReadableFile(atPath: path) else {
                throw ConfigurationError("\(place): cannot read the cert_path \(path)")
            }
            if let certKeyPath = entry.certKeyPath {
                let keyPath = resolve(certKeyPath, in: directory)
                guard FileManager.default.isReadableFile(atPath: keyPath) else {
                    throw ConfigurationError("\(place): cannot read the cert_key_path \(keyPath)")
                }
                return .certificate(pemCertificatePath: path, pemPrivateKeyPath: keyPath)
            }
            if isPEM(path) {
                // A PEM file holding both the certificate and its key.
                return .certificate(pemCertificatePath: path, pemPrivateKeyPath: path)
            }
            return .certificate(pkcs12Path: path, password: entry.certPassword)
        case (nil, nil):
            throw ConfigurationError("\(place): give key_path (token) or cert_path (certificate)")
        case (.some, .some):
            throw ConfigurationError("\(place): give key_path or cert_path, not both")
        }
    }

    private static func resolve(_ path: String, in directory: String) -> String {
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
