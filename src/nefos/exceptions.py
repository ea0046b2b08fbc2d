"""Errors that cross layers, each carrying the HTTP status it maps to.

Services raise these; the APIs turn them into the OpenStack error body of
their flavour (Nova's ``{"itemNotFound": {...}}`` or Neutron's
``{"NeutronError": {...}}``); the bus carries them by class name so that a
caller of a remote method gets the same typed error back.
"""

from __future__ import annotations


class NefosError(Exception):
    code = 500
    message = "An unknown error occurred."

    def __init__(self, message: str | None = None, **kwargs):
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.message % kwargs if kwargs else self.message
            except (KeyError, TypeError, ValueError):
                message = self.message
        super().__init__(message)

    @property
    def msg(self) -> str:
        return str(self)


class ConfigError(ValueError):
    """The configuration cannot be used; the message says which option and why. Raised where a
    service starts (never over the bus: not a registered error)."""


_registry: dict[str, type[NefosError]] = {}


def error_class(name: str) -> type[NefosError] | None:
    """The error class of this name, for re-raising errors that came over the bus."""
    return _registry.get(name)


class _Meta(type):
    def __init__(cls, name, bases, ns):
        super().__init__(name, bases, ns)
        _registry[name] = cls


class Error(NefosError, metaclass=_Meta):
    """Base for every registered error."""


class Invalid(Error):
    code = 400
    message = "Unacceptable parameters."


class ValidationError(Invalid):
    message = "Invalid input: %(detail)s"


class NotAuthorized(Error):
    code = 403
    message = "Not authorized."


class PolicyNotAuthorized(NotAuthorized):
    message = "Policy doesn't allow %(action)s to be performed."


class Unauthorized(Error):
    code = 401
    message = "The request you have made requires authentication."


class NotFound(Error):
    code = 404
    message = "Resource could not be found."


class Gone(Error):
    """An API Nova removed (its HTTPGone, webob's wording)."""
    code = 410
    message = "This resource is no longer available.  No forwarding address is given."


class Conflict(Error):
    code = 409
    message = "Conflict."


class OverQuota(Error):
    code = 403
    message = "Quota exceeded for %(overs)s."


class TooManyRequests(Error):
    """429 (RFC 6585): a bounded resource is at its limit for this caller. ``Retry-After`` says when
    to try again; the connection is closed, so a refused request holds no socket open."""
    code = 429
    message = "Too many requests: try again in %(retry_after)s seconds."

    @property
    def headers(self) -> dict[str, str]:
        headers = {"Connection": "close"}
        if "retry_after" in self.kwargs:
            headers["Retry-After"] = str(self.kwargs["retry_after"])
        return headers


class NotAcceptable(Error):
    code = 406
    message = "Not acceptable."


class RequestTimeout(Error):
    """A request head that did not arrive whole in time (webob's HTTPRequestTimeout; haproxy's and
    Apache's answer when their request-head deadline passes)."""
    code = 408
    message = "The request did not arrive whole in time."


class RequestURITooLong(Error):
    """A request line longer than the server reads (webob's HTTPRequestURITooLong; python-neutronclient
    splits a long filter into several requests on it)."""
    code = 414
    message = "The request-URI was too long for this server."


class RequestHeaderFieldsTooLarge(Error):
    """A request head (line and headers) larger than the server holds (RFC 6585's 431)."""
    code = 431
    message = "The request's header fields are too large."


class ServiceUnavailable(Error):
    code = 503
    message = "Service unavailable."


class NoServerListening(ServiceUnavailable):
    """No server of the target listens: the broker (or the in-process bus) refused the message,
    so it certainly reached no one (unlike a timeout, after which it may have)."""
    message = "No server listens on %(target)s."


class DatabaseUnavailable(ServiceUnavailable):
    """The database could not be reached, or the connection to it was lost, and did not come
    back within the retries: nothing was committed past what the caller was told."""
    message = "The database is unavailable. Please retry the request later."


class DatabaseBusy(ServiceUnavailable):
    """The database kept rolling the transaction back for contention (deadlocks, lock waits)."""
    message = "The database is too busy to complete the request. Please retry the request later."


# Compute ---------------------------------------------------------------------

class InstanceNotFound(NotFound):
    message = "Instance %(instance_id)s could not be found."


class FlavorNotFound(NotFound):
    message = "Flavor %(flavor_id)s could not be found."


class ImageNotFound(NotFound):
    message = "Image %(image_id)s could not be found."


class KeypairNotFound(NotFound):
    message = "Keypair %(name)s not found for user %(user_id)s"


class ServiceNotFound(NotFound):
    message = "Service %(service_id)s could not be found."


class ComputeHostNotFound(NotFound):
    message = "Compute host %(host)s could not be found."


class AggregateNotFound(NotFound):
    message = "Aggregate %(aggregate_id)s could not be found."


class AggregateNameExists(Conflict):
    message = "Aggregate %(aggregate_name)s already exists."


class AggregateHostExists(Conflict):
    message = "Aggregate %(aggregate_id)s already has host %(host)s."


class AggregateHostNotFound(NotFound):
    message = "Aggregate %(aggregate_id)s has no host %(host)s."


class InvalidAggregateAction(Invalid):
    """An aggregate change Nova refuses (400; add/remove host answer 409 at the API, as Nova's do)."""
    message = "Unacceptable parameters."


class InvalidAggregateActionAdd(InvalidAggregateAction):
    message = "Cannot add host to aggregate %(aggregate_id)s. Reason: %(reason)s."


class InvalidAggregateActionDelete(InvalidAggregateAction):
    message = "Cannot remove host from aggregate %(aggregate_id)s. Reason: %(reason)s."


class InvalidAggregateActionUpdate(InvalidAggregateAction):
    message = "Cannot update aggregate %(aggregate_id)s. Reason: %(reason)s."


class InvalidAggregateActionUpdateMeta(InvalidAggregateAction):
    message = "Cannot update metadata of aggregate %(aggregate_id)s. Reason: %(reason)s."


class InstanceActionNotFound(NotFound):
    message = "Action for request_id %(request_id)s on instance %(instance_uuid)s not found"


class InstanceGroupNotFound(NotFound):
    message = "Instance group %(group_uuid)s could not be found."


class InstanceInvalidState(Conflict):
    message = ("Cannot '%(action)s' instance %(instance_uuid)s while it is in "
               "%(attr)s %(state)s")


class UnshelveInstanceInvalidState(InstanceInvalidState):
    message = ('Specifying an availability zone or a host when unshelving server "%(instance_uuid)s" with '
               'status "%(state)s" is not supported. The server status must be SHELVED_OFFLOADED.')


class UnshelveHostNotInAZ(Conflict):
    message = 'Host "%(host)s" is not in the availability zone "%(availability_zone)s".'


class InstanceIsLocked(Conflict):
    message = "Instance %(instance_uuid)s is locked"


class UnexpectedTaskStateError(Conflict):
    message = ("Conflict updating instance %(instance_uuid)s. "
               "Expected: %(expected)s. Actual: %(actual)s")


class UnexpectedDeletingTaskStateError(UnexpectedTaskStateError):
    pass


class InstanceExists(Conflict):
    message = "Instance %(name)s already exists."


class KeyPairExists(Conflict):
    message = "Key pair '%(key_name)s' already exists."


class FlavorExists(Conflict):
    message = "Flavor with %(what)s %(value)s already exists."


class NoValidHost(Error):
    code = 500
    message = "No valid host was found. %(reason)s"


class MaxRetriesExceeded(NoValidHost):
    message = "Exceeded maximum number of retries. %(reason)s"


class RescheduledException(Error):
    message = "Build of instance %(instance_uuid)s was re-scheduled: %(reason)s"


class CertificateValidationFailed(Invalid):
    message = "Image signature certificate validation failed for certificate: %(cert_uuid)s. %(reason)s"


class BuildAbortException(Error):
    message = "Build of instance %(instance_uuid)s aborted: %(reason)s"


class ComputeResourcesUnavailable(Error):
    message = "Insufficient compute resources: %(reason)s."


class RescheduledByPolicyException(RescheduledException):
    message = "Build of instance %(instance_uuid)s was re-scheduled: %(reason)s"


class VirtualInterfaceCreateException(Error):
    message = "Virtual Interface creation failed"


class InterfaceAttachFailed(Error):
    message = "Failed to attach network adapter device to %(instance_uuid)s"


class InterfaceDetachFailed(Error):
    message = "Failed to detach network adapter device from %(instance_uuid)s"


class InterfaceAttachFailedNoNetwork(Invalid):
    message = "No specific network was requested and none are available for project '%(project_id)s'."


class PortNotAttached(NotFound):
    message = "Instance %(instance)s does not have a port with id %(port_id)s"


class InstanceDeployFailure(Error):
    message = "Failed to deploy instance: %(reason)s"


class InstanceBuildTimeout(Error):
    message = "Instance build timed out after %(timeout)s seconds (instance_build_timeout). Set to error state."


class InstanceTaskTimeout(Error):
    message = ("Instance task %(task_state)s timed out after %(timeout)s seconds (task_state_timeout). "
               "Set to error state.")


class HypervisorUnavailable(Error):
    message = "Connection to the hypervisor is broken on host: %(host)s"


class HostConfigurationError(Error):
    """The host is set up in a way a compute service must not run on (it says how to fix it)."""
    message = "This host cannot run guests safely: %(reason)s"


class InstanceNotReady(Conflict):
    message = "Instance %(instance_id)s is not ready"  # Nova's


class ConsoleNotAvailable(NotFound):
    message = "Guest does not have a console available."


class ConsoleTypeInvalid(Invalid):
    message = "Invalid console type %(console_type)s"


class ConsoleTypeUnavailable(Invalid):
    message = "Unavailable console type %(console_type)s."


class InvalidToken(Invalid):
    message = "The token '%(token)s' is invalid or has expired"


class NotSupported(Error):
    code = 501
    message = "Action is not supported."


class SetAdminPasswdNotSupported(NotSupported):
    message = "Unable to set password on instance"


class InstancePasswordSetFailed(Conflict):
    message = "Failed to set admin password on %(instance)s because %(reason)s"


class InstanceAgentNotEnabled(Conflict):
    """Nova's: changePassword on a guest without an agent to set it (its API answers 409)."""
    message = "Guest agent is not enabled for the instance"


class QemuGuestAgentNotEnabled(InstanceAgentNotEnabled):
    message = "QEMU guest agent is not enabled"


class QuotaError(OverQuota):
    pass


class OnsetFileLimitExceeded(QuotaError):
    message = "Personality file limit exceeded"


class OnsetFilePathLimitExceeded(OnsetFileLimitExceeded):
    message = "Personality file path exceeds maximum %(allowed)s"


class OnsetFileContentLimitExceeded(OnsetFileLimitExceeded):
    message = "Personality file content exceeds maximum %(allowed)s"


class MarkerNotFound(Invalid):
    message = "Marker %(marker)s could not be found."


class FlavorExtraSpecsNotFound(NotFound):
    message = "Flavor %(flavor_id)s has no extra specs with key %(extra_specs_key)s."


class FlavorAccessExists(Conflict):
    message = ("Flavor access already exists for flavor %(flavor_id)s and project "
               "%(project_id)s combination.")


class FlavorAccessNotFound(NotFound):
    message = "Flavor access not found for %(flavor_id)s / %(project_id)s combination."


class InvalidKeypair(Invalid):
    message = "Keypair data is invalid: %(reason)s"


class KeypairLimitExceeded(OverQuota):
    message = "Quota exceeded, too many key pairs."


class HostBinaryNotFound(NotFound):
    message = "Could not find binary %(binary)s on host %(host)s."


class HypervisorNotFound(NotFound):
    message = "Hypervisor with ID '%(id)s' could not be found."


class ServiceInUse(Conflict):
    message = "%(reason)s"


class ServerGroupLimitExceeded(OverQuota):
    message = "Quota exceeded, too many server groups."


class ServerGroupMembersLimitExceeded(OverQuota):
    message = "Quota exceeded, too many servers in group"


# Network ---------------------------------------------------------------------

class NetworkNotFound(NotFound):
    message = "Network %(net_id)s could not be found."


class SubnetNotFound(NotFound):
    message = "Subnet %(subnet_id)s could not be found."


class PortNotFound(NotFound):
    message = "Port %(port_id)s could not be found."


class SecurityGroupNotFound(NotFound):
    message = "Security group %(id)s does not exist"


class SecurityGroupRuleNotFound(NotFound):
    message = "Security group rule %(id)s does not exist"


class NetworkAmbiguous(Conflict):
    message = ("Multiple possible networks found, use a Network ID to be more "
               "specific.")


class NetworkRequiresSubnet(Invalid):
    message = ("Network %(network_uuid)s requires a subnet in order to boot "
               "instances on.")


class PortInUse(Conflict):
    message = "Port %(port_id)s is still in use."


class DeviceIDNotOwnedByTenant(Conflict):
    message = ("The following device_id %(device_id)s is not owned by your project or matches another "
               "project router.")


class PortNotUsable(Invalid):
    message = "Port %(port_id)s not usable for instance %(instance)s."


class FixedIpAlreadyInUse(Conflict):
    message = ("Fixed IP address %(address)s is already in use on network "
               "%(net_id)s.")


class IpAddressGenerationFailure(Conflict):
    message = "No more IP addresses available on network %(net_id)s."


class InvalidIpAddress(Invalid):
    message = "Invalid IP address: %(address)s"


class MacAddressInUse(Conflict):
    message = "Unable to complete operation for network %(net_id)s. The mac address %(mac)s is in use."


class SecurityGroupAmbiguous(Conflict):
    message = ("Multiple security groups found matching '%(name)s'. Use an ID "
               "to be more specific.")


class InUse(Conflict):
    message = "%(what)s %(id)s is in use."


class ExternalNetworkAttachForbidden(NotAuthorized):
    message = "It is not allowed to create an interface on external network %(network_uuid)s"


# Neutron's own error types (the class name is the NeutronError "type"). Where Nova has a
# name for the same failure, the Neutron class subclasses it so compute callers can catch
# the Nova name and the Networking API still renders Neutron's.

class InvalidInput(Invalid):
    message = "Invalid input for operation: %(error_message)s."


class NoNetworkAvailable(ServiceUnavailable):
    message = "Unable to create the network. No tenant network is available for allocation."


class NetworkInUse(InUse):
    message = ("Unable to complete operation on network %(net_id)s. There are one or more "
               "ports still in use on the network.")


class SubnetInUse(InUse):
    message = ("Unable to complete operation on subnet %(subnet_id)s: One or more ports have "
               "an IP allocation from this subnet.")


class SecurityGroupInUse(InUse):
    message = "Security Group %(id)s in use."


class SecurityGroupCannotRemoveDefault(Conflict):
    message = "Insufficient rights for removing default security group."


class SecurityGroupDefaultAlreadyExists(Conflict):
    message = "Default security group already exists."


class SecurityGroupRuleExists(Conflict):
    message = "Security group rule already exists. Rule id is %(rule_id)s."


class SecurityGroupRuleParameterConflict(Invalid):
    message = "Conflicting value ethertype %(ethertype)s for CIDR %(cidr)s"


class SecurityGroupRemoteGroupAndRemoteIpPrefix(Invalid):
    message = "Only remote_ip_prefix or remote_group_id may be provided."


class SecurityGroupProtocolRequiredWithPorts(Invalid):
    message = "Must also specify protocol if port range is given."


class SecurityGroupInvalidPortRange(Invalid):
    message = "For TCP/UDP protocols, port_range_min must be <= port_range_max"


class SecurityGroupInvalidPortValue(Invalid):
    message = "Invalid value for port %(port)s"


class SecurityGroupInvalidIcmpValue(Invalid):
    message = "Invalid value for ICMP %(field)s (%(attr)s) %(value)s. It must be 0 to 255."


class SecurityGroupRuleInvalidProtocol(Invalid):
    message = ("Security group rule protocol %(protocol)s not supported. Only protocol values "
               "%(values)s and integer representations [0 to 255] are supported.")


class SecurityGroupCannotBeApplied(Invalid):
    message = ("Network requires port_security_enabled and subnet associated in order to "
               "apply security groups.")


class PortSecurityAndIPRequiredForSecurityGroups(Invalid):
    message = ("Port security must be enabled and port must have an IP address in order to "
               "use security groups.")


class IpAddressInUse(FixedIpAlreadyInUse):
    message = ("Unable to complete operation for network %(net_id)s. The IP address "
               "%(ip_address)s is in use.")


class InvalidIpForNetwork(InvalidIpAddress):
    message = ("IP address %(ip_address)s is not a valid IP for any of the subnets on the "
               "specified network.")


class InvalidIpForSubnet(InvalidIpAddress):
    message = "IP address %(ip_address)s is not a valid IP for the specified subnet."

    @classmethod
    def gateway_held(cls, address: str, subnet_id: str) -> InvalidIpForSubnet:
        """The answer to a port that is not a router's interface asking for its subnet's gateway
        address: every other guest of the subnet routes through that address. Neutron answers so
        (InvalidIpForSubnet, 400) for the other address it keeps for routers, an IPv6 subnet's
        anycast address."""
        return cls(f"IP address {address} is the gateway of subnet {subnet_id}: only a router interface may hold it.",
                   ip_address=address)


class GatewayConflictWithAllocationPools(Conflict):
    message = "Gateway ip %(ip_address)s conflicts with allocation pool %(pool)s."


class OverlappingAllocationPools(Conflict):
    message = "Found overlapping allocation pools: %(pool_1)s %(pool_2)s for subnet %(subnet_cidr)s."


class OutOfBoundsAllocationPool(Invalid):
    message = "The allocation pool %(pool)s spans beyond the subnet cidr %(subnet_cidr)s."


class InvalidAllocationPool(Invalid):
    message = "The allocation pool %(pool)s is not valid."


class InvalidSharedSetting(Conflict):
    message = ("Unable to reconfigure sharing settings for network %(network)s. Multiple "
               "tenants are using it.")


class PortRequiresFixedIP(Invalid):
    message = "Port %(port_id)s requires a FixedIP in order to be used."


class AutoAllocationFailure(Conflict):
    """Neutron's: no auto-allocated topology can be built (no default external network, ...)."""
    message = "Deployment error: %(reason)s."


class DefaultExternalNetworkExists(Conflict):
    message = "A default external network already exists: %(net_id)s."


class UnableToAutoAllocateNetwork(Invalid):
    message = "Unable to automatically allocate a network for project %(project_id)s"


# Image -----------------------------------------------------------------------

class RequestEntityTooLarge(Error):
    code = 413
    message = "Request entity too large."


class ImageSizeLimitExceeded(RequestEntityTooLarge):
    message = "The provided image is too large (the limit is %(limit)s bytes)."


class ImageLimitExceeded(RequestEntityTooLarge):
    message = "Attempted to exceed the limit of %(limit)s %(what)s on an image."


class UnsupportedMediaType(Error):
    code = 415
    message = "Unsupported Content-Type %(content_type)s."


class ImageForbidden(NotAuthorized):
    message = "%(reason)s"


class ImageProtected(NotAuthorized):
    message = "Image %(image_id)s is protected and cannot be deleted."


class ImageConflict(Conflict):
    message = "%(reason)s"


class ImageUnacceptable(Invalid):
    message = "Image %(image_id)s is unacceptable: %(reason)s"


class FlavorDiskSmallerThanImage(Invalid):
    message = ("Flavor's disk is too small for requested image. Flavor disk is %(flavor_size)i bytes, "
               "image is %(image_size)i bytes.")


# Routers and floating IPs (Neutron's L3 names and messages) -----------------------------------
class BadRequest(Invalid):
    """Neutron's ``BadRequest(resource, msg)``: ``Bad <resource> request: <msg>``."""
    message = "Bad %(resource)s request: %(msg)s."


class InvalidRoutes(Invalid):
    message = "Invalid format for routes: %(routes)s, %(reason)s"


class RouterNotFound(NotFound):
    message = "Router %(router_id)s could not be found"


class RouterInUse(InUse):
    message = "Router %(router_id)s %(reason)s"


class RouterInterfaceNotFound(NotFound):
    message = "Router %(router_id)s does not have an interface with id %(port_id)s"


class RouterInterfaceNotFoundForSubnet(NotFound):
    message = "Router %(router_id)s has no interface on subnet %(subnet_id)s"


class RouterInterfaceInUseByFloatingIP(InUse):
    message = ("Router interface for subnet %(subnet_id)s on router %(router_id)s cannot be deleted, "
               "as it is required by one or more floating IPs.")


class RouterExternalGatewayInUseByFloatingIp(InUse):
    message = ("Gateway cannot be updated for router %(router_id)s, since a gateway to external network "
               "%(net_id)s is required by one or more floating IPs.")


class FloatingIPNotFound(NotFound):
    message = "Floating IP %(floatingip_id)s could not be found"


class FloatingIpNotFoundForAddress(NotFound):
    """Nova's: no floating IP the caller may see has this address."""
    message = "Floating IP not found for address %(address)s."


class FloatingIpMultipleFoundForAddress(Error):
    code = 500
    message = "Multiple floating IPs are found for address %(address)s."


class FixedIpNotFoundForAddress(Invalid):
    """Nova's: none of the server's ports holds this fixed address (a 400 for addFloatingIp)."""
    message = "Fixed IP not found for address %(address)s."


class NoFixedIpForNetwork(Invalid):
    """addFixedIp: the server has no port on that network, or none of its subnets gave an address."""
    message = "Unable to add a fixed IP on network %(network_id)s to instance %(instance_uuid)s."


class FixedIpNotFoundForInstance(Invalid):
    """Nova's FixedIpNotFoundForSpecificInstance: removeFixedIp of an address no port of the server holds."""
    message = "Instance %(instance_uuid)s doesn't have fixed IP '%(ip)s'."


class FloatingIpNotAssociatedWithInstance(Conflict):
    """Nova's 409 for a removeFloatingIp of a floating IP that is not on the server."""
    message = "Floating IP %(address)s is not associated with instance %(instance)s."


class FloatingIpAssociateFailed(Invalid):
    """Nova's: the network service refused the association (a 400 for addFloatingIp)."""
    message = "Unable to associate floating IP: %(reason)s"


class ExternalGatewayForFloatingIPNotFound(NotFound):
    message = ("External network %(external_network_id)s is not reachable from subnet %(subnet_id)s.  "
               "Therefore, cannot associate Port %(port_id)s with a Floating IP.")


class FloatingIPPortAlreadyAssociated(InUse):
    message = ("Cannot associate floating IP %(floating_ip_address)s (%(fip_id)s) with port %(port_id)s "
               "using fixed IP %(fixed_ip)s, as that fixed IP already has a floating IP on external "
               "network %(net_id)s.")


class ServicePortInUse(InUse):
    message = "Port %(port_id)s cannot be deleted directly via the port API: %(reason)s."


# Resize and cold migration (Nova's names and answers) ------------------------------------------
class CannotResizeToSameFlavor(Invalid):
    message = "When resizing, instances must change flavor!"


class CannotResizeDisk(Invalid):
    message = "Server disk was unable to be resized because: %(reason)s"


class CannotMigrateToSameHost(Invalid):
    message = "Cannot migrate to the host where the server exists."


class MigrationNotFoundByStatus(Invalid):
    message = "Instance has not been resized."


class ResizeNotSupported(Conflict):
    """A host whose hypervisor driver cannot resize or migrate (the libvirt driver, for now)."""
    message = "The hypervisor driver of host %(host)s cannot resize or migrate servers."


class ComputeServiceUnavailable(Conflict):
    message = "Compute service of %(host)s is unavailable at this time."


class UnableToMigrateToSelf(Invalid):
    message = "Unable to migrate instance (%(instance_id)s) to current host (%(host)s)."


class MigrationPreCheckError(Invalid):
    message = "Migration pre-check error: %(reason)s"


class InvalidMigrationState(Invalid):
    message = ("Migration %(migration_id)s state of instance %(instance_uuid)s is %(state)s. Cannot "
               "%(method)s while the migration is in this state.")


class MigrationNotFoundForInstance(NotFound):
    message = "Migration %(migration_id)s not found for instance %(instance_id)s"


class LiveMigrationAborted(Error):
    message = "Live migration of instance %(instance_uuid)s was aborted."


class InstanceFieldsNotHostWritable(Invalid):
    """A compute host's instance save naming a field only the control plane writes (an instance's
    owner, name, image...): refused whole, nothing written."""
    message = "A compute host may not write the instance field(s) %(fields)s; nothing was saved."
