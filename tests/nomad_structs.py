"""The JSON shape of the Nomad `api` structs the agent's v1 API answers with, and a checker.

STRUCTS maps a struct's name to {JSON field: spec}, as encoding/json writes the Go struct (the files cited
are in Nomad's repository, api/ unless said otherwise). A spec is:

- a Python type, or a tuple of them (`NULL` among them where the Go field is a pointer, slice or map,
  which Go writes as null when nil);
- `TIME`: a time.Time, an RFC 3339 string (Go's zero time "0001-01-01T00:00:00Z" included);
- `Struct(name)`: an object of another struct of the table (`null=True`: a pointer to it);
- `ListOf(spec)` / `MapOf(spec)`: a slice / a map with string keys (null allowed unless `null=False`);
- `Omit(spec)`: a field tagged `json:",omitempty"`: left out when empty.

Go's ints (int, int64, uint64, time.Duration in ns) are Python ints and never bools.

`check_shape(name, value)` fails (AssertionError) naming the path of the first missing field, unknown
field or value of the wrong type, e.g. "Allocation.TaskStates[web].Events[0].Time: expected int".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.decide.jobupdate import DESIRED_UPDATES

NULL = type(None)


class _Time:
    def __repr__(self) -> str:
        return "TIME"


TIME = _Time()


@dataclass(frozen=True)
class Struct:
    name: str
    null: bool = False


@dataclass(frozen=True)
class ListOf:
    item: Spec
    null: bool = True


@dataclass(frozen=True)
class MapOf:
    value: Spec
    null: bool = True


@dataclass(frozen=True)
class Omit:
    spec: Spec


Spec = type | tuple[type, ...] | _Time | Struct | ListOf | MapOf | Omit

STR, INT, BOOL, FLOAT = str, int, bool, float
OSTR, OINT, OBOOL = (str, NULL), (int, NULL), (bool, NULL)  # *string, *int, *bool (and *time.Duration)
OBJ, LIST = (dict, NULL), (list, NULL)  # a pointer to / slice of a struct the table does not describe
STRS, STRMAP = ListOf(str), MapOf(str)  # []string, map[string]string
ANYMAP = (dict, NULL)  # map[string]any

STRUCTS: dict[str, dict[str, Spec]] = {
    # api/jobs.go: type Job struct
    "Job": {
        "Region": OSTR,
        "Namespace": OSTR,
        "ID": OSTR,
        "Name": OSTR,
        "Type": OSTR,
        "Priority": OINT,
        "AllAtOnce": OBOOL,
        "Datacenters": STRS,
        "NodePool": OSTR,
        "Constraints": LIST,
        "Affinities": LIST,
        "TaskGroups": ListOf(Struct("TaskGroup", null=True)),
        "Update": OBJ,
        "Multiregion": OBJ,
        "Spreads": LIST,
        "Periodic": OBJ,
        "ParameterizedJob": OBJ,
        "Reschedule": OBJ,
        "Migrate": OBJ,
        "Meta": STRMAP,
        "UI": OBJ,
        "Stop": OBOOL,
        "ParentID": OSTR,
        "Dispatched": BOOL,
        "DispatchIdempotencyToken": OSTR,
        "Payload": OSTR,  # []byte: base64
        "ConsulNamespace": OSTR,
        "VaultNamespace": OSTR,
        "NomadTokenID": OSTR,
        "Status": OSTR,
        "StatusDescription": OSTR,
        "Stable": OBOOL,
        "Version": OINT,
        "SubmitTime": OINT,
        "CreateIndex": OINT,
        "ModifyIndex": OINT,
        "JobModifyIndex": OINT,
        "VersionTag": OBJ,
    },
    # api/tasks.go: type TaskGroup struct
    "TaskGroup": {
        "Name": OSTR,
        "Count": OINT,
        "Constraints": LIST,
        "Affinities": LIST,
        "Tasks": ListOf(Struct("Task", null=True)),
        "Spreads": LIST,
        "Volumes": OBJ,
        "RestartPolicy": Struct("RestartPolicy", null=True),
        "Disconnect": OBJ,
        "ReschedulePolicy": OBJ,
        "EphemeralDisk": OBJ,
        "Update": OBJ,
        "Migrate": OBJ,
        "Networks": ListOf(Struct("NetworkResource", null=True)),
        "Meta": STRMAP,
        "Services": ListOf(Struct("Service", null=True)),
        "ShutdownDelay": OINT,
        "MaxRunDuration": OINT,
        "StopAfterClientDisconnect": OINT,
        "MaxClientDisconnect": OINT,
        "Scaling": OBJ,
        "Consul": OBJ,
        "PreventRescheduleOnLost": OBOOL,
    },
    # api/tasks.go: type Task struct
    "Task": {
        "Name": STR,
        "Driver": STR,
        "User": STR,
        "Lifecycle": OBJ,
        "Config": ANYMAP,
        "Constraints": LIST,
        "Affinities": LIST,
        "Env": STRMAP,
        "Services": ListOf(Struct("Service", null=True)),
        "Resources": Struct("Resources", null=True),
        "RestartPolicy": Struct("RestartPolicy", null=True),
        "Meta": STRMAP,
        "KillTimeout": OINT,
        "LogConfig": OBJ,
        "Artifacts": LIST,
        "Vault": Struct("Vault", null=True),
        "Consul": OBJ,
        "Templates": ListOf(Struct("Template", null=True)),
        "DispatchPayload": OBJ,
        "VolumeMounts": LIST,
        "CSIPluginConfig": Omit(OBJ),
        "Leader": BOOL,
        "ShutdownDelay": INT,
        "KillSignal": STR,
        "Kind": STR,
        "ScalingPolicies": LIST,
        "Secrets": LIST,
        "Identity": OBJ,
        "Identities": LIST,
        "Actions": LIST,
        "Schedule": OBJ,
    },
    # api/tasks.go: type RestartPolicy struct
    "RestartPolicy": {
        "Interval": OINT,
        "Attempts": OINT,
        "Delay": OINT,
        "Mode": OSTR,
        "RenderTemplates": OBOOL,
    },
    # api/resources.go: type NetworkResource struct
    "NetworkResource": {
        "Mode": STR,
        "Device": STR,
        "CIDR": STR,
        "IP": STR,
        "DNS": OBJ,
        "ReservedPorts": ListOf(Struct("Port")),
        "DynamicPorts": ListOf(Struct("Port")),
        "Hostname": STR,
        "MBits": OINT,
        "CNI": OBJ,
    },
    # api/resources.go: type Port struct
    "Port": {"Label": STR, "Value": INT, "To": INT, "HostNetwork": STR, "IgnoreCollision": BOOL},
    # api/services.go: type Service struct
    "Service": {
        "Name": STR,
        "Tags": STRS,
        "CanaryTags": STRS,
        "EnableTagOverride": BOOL,
        "PortLabel": STR,
        "AddressMode": STR,
        "Address": STR,
        "Checks": ListOf(Struct("ServiceCheck")),
        "CheckRestart": OBJ,
        "Connect": OBJ,
        "Meta": STRMAP,
        "CanaryMeta": STRMAP,
        "TaggedAddresses": STRMAP,
        "TaskName": STR,
        "OnUpdate": STR,
        "Identity": OBJ,
        "Weights": OBJ,
        "Provider": STR,
        "Cluster": STR,
        "Kind": STR,
    },
    # api/services.go: type ServiceCheck struct
    "ServiceCheck": {
        "Name": STR,
        "Type": STR,
        "Command": STR,
        "Args": STRS,
        "Path": STR,
        "Protocol": STR,
        "PortLabel": STR,
        "Expose": BOOL,
        "AddressMode": STR,
        "Advertise": STR,
        "Interval": INT,
        "Timeout": INT,
        "InitialStatus": STR,
        "Notes": STR,
        "TLSServerName": STR,
        "TLSSkipVerify": BOOL,
        "Header": MapOf(STRS),
        "Method": STR,
        "CheckRestart": OBJ,
        "GRPCService": STR,
        "GRPCUseTLS": BOOL,
        "TaskName": STR,
        "SuccessBeforePassing": INT,
        "FailuresBeforeCritical": INT,
        "FailuresBeforeWarning": INT,
        "Body": STR,
        "OnUpdate": STR,
    },
    # api/resources.go: type Resources struct
    "Resources": {
        "CPU": OINT,
        "Cores": OINT,
        "MemoryMB": OINT,
        "MemoryMaxMB": OINT,
        "DiskMB": OINT,
        "Networks": ListOf(Struct("NetworkResource", null=True)),
        "Devices": LIST,
        "NUMA": OBJ,
        "SecretsMB": OINT,
        "IOPS": OINT,
    },
    # api/tasks.go: type Template struct
    "Template": {
        "SourcePath": OSTR,
        "DestPath": OSTR,
        "EmbeddedTmpl": OSTR,
        "ChangeMode": OSTR,
        "ChangeScript": Struct("ChangeScript", null=True),
        "ChangeSignal": OSTR,
        "Once": OBOOL,
        "Splay": OINT,
        "Perms": OSTR,
        "Uid": OINT,
        "Gid": OINT,
        "LeftDelim": OSTR,
        "RightDelim": OSTR,
        "Envvars": OBOOL,
        "VaultGrace": OINT,
        "Wait": Struct("WaitConfig", null=True),
        "ErrMissingKey": OBOOL,
    },
    # api/tasks.go: type ChangeScript struct
    "ChangeScript": {
        "Command": OSTR,
        "Args": STRS,
        "Timeout": OINT,
        "FailOnError": OBOOL,
        "RunOnFirstRender": OBOOL,
    },
    # api/tasks.go: type WaitConfig struct
    "WaitConfig": {"Min": OINT, "Max": OINT},
    # api/tasks.go: type Vault struct
    "Vault": {
        "Policies": STRS,
        "Role": STR,
        "Namespace": OSTR,
        "Cluster": STR,
        "Env": OBOOL,
        "DisableFile": OBOOL,
        "ChangeMode": OSTR,
        "ChangeSignal": OSTR,
        "AllowTokenExpiration": OBOOL,
    },
    # api/jobs.go: type JobListStub struct
    "JobListStub": {
        "ID": STR,
        "ParentID": STR,
        "Name": STR,
        "Namespace": Omit(STR),
        "Datacenters": STRS,
        "Type": STR,
        "Priority": INT,
        "Periodic": BOOL,
        "ParameterizedJob": BOOL,
        "Stop": BOOL,
        "Status": STR,
        "StatusDescription": STR,
        "JobSummary": Struct("JobSummary", null=True),
        "CreateIndex": INT,
        "ModifyIndex": INT,
        "JobModifyIndex": INT,
        "SubmitTime": INT,
        "Meta": Omit(STRMAP),
    },
    # api/jobs.go: type JobSummary struct
    "JobSummary": {
        "JobID": STR,
        "Namespace": STR,
        "Summary": MapOf(Struct("TaskGroupSummary")),
        "Children": Struct("JobChildrenSummary", null=True),
        "CreateIndex": INT,
        "ModifyIndex": INT,
    },
    # api/jobs.go: type TaskGroupSummary struct
    "TaskGroupSummary": {
        "Queued": INT,
        "Complete": INT,
        "Failed": INT,
        "Running": INT,
        "Starting": INT,
        "Lost": INT,
        "Unknown": INT,
    },
    # api/jobs.go: type JobChildrenSummary struct
    "JobChildrenSummary": {"Pending": INT, "Running": INT, "Dead": INT},
    # api/tasks.go: type TaskEvent struct
    "TaskEvent": {
        "Type": STR,
        "Time": INT,
        "DisplayMessage": STR,
        "Details": STRMAP,
        "Message": STR,
        "FailsTask": BOOL,
        "RestartReason": STR,
        "SetupError": STR,
        "DriverError": STR,
        "DriverMessage": STR,
        "ExitCode": INT,
        "Signal": INT,
        "KillReason": STR,
        "KillTimeout": INT,
        "KillError": STR,
        "StartDelay": INT,
        "DownloadError": STR,
        "ValidationError": STR,
        "DiskLimit": INT,
        "DiskSize": INT,
        "FailedSibling": STR,
        "VaultError": STR,
        "TaskSignalReason": STR,
        "TaskSignal": STR,
        "GenericSource": STR,
    },
    # api/tasks.go: type TaskState struct
    "TaskState": {
        "State": STR,
        "Failed": BOOL,
        "Restarts": INT,
        "LastRestart": TIME,
        "StartedAt": TIME,
        "FinishedAt": TIME,
        "Events": ListOf(Struct("TaskEvent", null=True)),
    },
    # api/allocations.go: type Allocation struct
    "Allocation": {
        "ID": STR,
        "Namespace": STR,
        "EvalID": STR,
        "Name": STR,
        "NodeID": STR,
        "NodeName": STR,
        "JobID": STR,
        "Job": Struct("Job", null=True),
        "TaskGroup": STR,
        "Resources": Struct("Resources", null=True),
        "TaskResources": MapOf(Struct("Resources", null=True)),
        "AllocatedResources": Struct("AllocatedResources", null=True),
        "Services": STRMAP,
        "Metrics": Struct("AllocationMetric", null=True),
        "DesiredStatus": STR,
        "DesiredDescription": STR,
        "DesiredTransition": Struct("DesiredTransition"),
        "ClientStatus": STR,
        "ClientDescription": STR,
        "TaskStates": MapOf(Struct("TaskState", null=True)),
        "DeploymentID": STR,
        "DeploymentStatus": OBJ,
        "FollowupEvalID": STR,
        "PreviousAllocation": STR,
        "NextAllocation": STR,
        "RescheduleTracker": OBJ,
        "NetworkStatus": Struct("AllocNetworkStatus", null=True),
        "PreemptedAllocations": STRS,
        "PreemptedByAllocation": STR,
        "CreateIndex": INT,
        "ModifyIndex": INT,
        "AllocModifyIndex": INT,
        "CreateTime": INT,
        "ModifyTime": INT,
    },
    # api/allocations.go: type AllocationListStub struct
    "AllocationListStub": {
        "ID": STR,
        "EvalID": STR,
        "Name": STR,
        "Namespace": STR,
        "NodeID": STR,
        "NodeName": STR,
        "JobID": STR,
        "JobType": STR,
        "JobVersion": INT,
        "TaskGroup": STR,
        "AllocatedResources": Omit(Struct("AllocatedResources", null=True)),
        "DesiredStatus": STR,
        "DesiredDescription": STR,
        "ClientStatus": STR,
        "ClientDescription": STR,
        "TaskStates": MapOf(Struct("TaskState", null=True)),
        "DeploymentStatus": OBJ,
        "FollowupEvalID": STR,
        "NextAllocation": STR,
        "RescheduleTracker": OBJ,
        "PreemptedAllocations": STRS,
        "PreemptedByAllocation": STR,
        "CreateIndex": INT,
        "ModifyIndex": INT,
        "CreateTime": INT,
        "ModifyTime": INT,
    },
    # api/allocations.go: type AllocatedResources struct
    "AllocatedResources": {
        "Tasks": MapOf(Struct("AllocatedTaskResources", null=True)),
        "Shared": Struct("AllocatedSharedResources"),
    },
    # api/allocations.go: type AllocatedTaskResources struct
    "AllocatedTaskResources": {
        "Cpu": Struct("AllocatedCpuResources"),
        "Memory": Struct("AllocatedMemoryResources"),
        "Networks": ListOf(Struct("NetworkResource", null=True)),
        "Devices": LIST,
    },
    # api/allocations.go: type AllocatedSharedResources struct
    "AllocatedSharedResources": {
        "DiskMB": INT,
        "Networks": ListOf(Struct("NetworkResource", null=True)),
        "Ports": ListOf(Struct("PortMapping")),
    },
    # api/allocations.go: type AllocatedCpuResources struct
    "AllocatedCpuResources": {"CpuShares": INT},
    # api/allocations.go: type AllocatedMemoryResources struct
    "AllocatedMemoryResources": {"MemoryMB": INT, "MemoryMaxMB": INT},
    # api/allocations.go: type PortMapping struct
    "PortMapping": {"Label": STR, "Value": INT, "To": INT, "HostIP": STR},
    # api/allocations.go: type AllocationMetric struct
    "AllocationMetric": {
        "NodesEvaluated": INT,
        "NodesFiltered": INT,
        "NodesInPool": INT,
        "NodePool": STR,
        "NodesAvailable": MapOf(int),
        "ClassFiltered": MapOf(int),
        "ConstraintFiltered": MapOf(int),
        "NodesExhausted": INT,
        "ClassExhausted": MapOf(int),
        "DimensionExhausted": MapOf(int),
        "QuotaExhausted": STRS,
        "ResourcesExhausted": MapOf(Struct("Resources", null=True)),
        "Scores": MapOf(float),
        "AllocationTime": INT,
        "CoalescedFailures": INT,
        "ScoreMetaData": LIST,
    },
    # api/allocations.go: type DesiredTransition struct
    "DesiredTransition": {
        "Migrate": OBOOL,
        "Reschedule": OBOOL,
        "ForceReschedule": OBOOL,
        "NoShutdownDelay": OBOOL,
        "MigrateDisablePlacement": OBOOL,
    },
    # api/allocations.go: type AllocNetworkStatus struct
    "AllocNetworkStatus": {"InterfaceName": STR, "Address": STR, "AddressIPv6": STR, "DNS": OBJ},
    # api/evaluations.go: type Evaluation struct
    "Evaluation": {
        "ID": STR,
        "Priority": INT,
        "Type": STR,
        "TriggeredBy": STR,
        "Namespace": STR,
        "JobID": STR,
        "JobModifyIndex": INT,
        "NodeID": STR,
        "NodeModifyIndex": INT,
        "DeploymentID": STR,
        "Status": STR,
        "StatusDescription": STR,
        "Wait": INT,
        "WaitUntil": TIME,
        "NextEval": STR,
        "PreviousEval": STR,
        "BlockedEval": STR,
        "RelatedEvals": LIST,
        "FailedTGAllocs": MapOf(Struct("AllocationMetric", null=True)),
        "PlanAnnotations": OBJ,
        "ClassEligibility": MapOf(bool),
        "EscapedComputedClass": BOOL,
        "QuotaLimitReached": STR,
        "MissingNonNodeResources": STRS,
        "AnnotatePlan": BOOL,
        "QueuedAllocations": MapOf(int),
        "SnapshotIndex": INT,
        "CreateIndex": INT,
        "ModifyIndex": INT,
        "CreateTime": INT,
        "ModifyTime": INT,
    },
    # api/nodes.go: type Node struct
    "Node": {
        "ID": STR,
        "Datacenter": STR,
        "Name": STR,
        "HTTPAddr": STR,
        "TLSEnabled": BOOL,
        "Attributes": STRMAP,
        "Resources": Struct("Resources", null=True),
        "Reserved": Struct("Resources", null=True),
        "NodeResources": Struct("NodeResources", null=True),
        "ReservedResources": Struct("NodeReservedResources", null=True),
        "Links": STRMAP,
        "Meta": STRMAP,
        "NodeClass": STR,
        "NodePool": STR,
        "CgroupParent": STR,
        "Drain": BOOL,
        "DrainStrategy": OBJ,
        "SchedulingEligibility": STR,
        "Status": STR,
        "StatusDescription": STR,
        "StatusUpdatedAt": INT,
        "Events": LIST,
        "Drivers": MapOf(Struct("DriverInfo", null=True)),
        "HostVolumes": OBJ,
        "GCVolumesOnNodeGC": BOOL,
        "HostNetworks": OBJ,
        "CSIControllerPlugins": OBJ,
        "CSINodePlugins": OBJ,
        "LastDrain": OBJ,
        "CreateIndex": INT,
        "ModifyIndex": INT,
        "NodeMaxAllocs": INT,
    },
    # api/nodes.go: type NodeListStub struct
    "NodeListStub": {
        "Address": STR,
        "ID": STR,
        "Attributes": Omit(STRMAP),
        "Datacenter": STR,
        "Name": STR,
        "NodeClass": STR,
        "NodePool": STR,
        "Version": STR,
        "Drain": BOOL,
        "SchedulingEligibility": STR,
        "Status": STR,
        "StatusDescription": STR,
        "Drivers": MapOf(Struct("DriverInfo", null=True)),
        "NodeResources": Omit(Struct("NodeResources", null=True)),
        "ReservedResources": Omit(Struct("NodeReservedResources", null=True)),
        "LastDrain": OBJ,
        "CreateIndex": INT,
        "ModifyIndex": INT,
    },
    # api/nodes.go: type DriverInfo struct
    "DriverInfo": {
        "Attributes": STRMAP,
        "Detected": BOOL,
        "Healthy": BOOL,
        "HealthDescription": STR,
        "UpdateTime": TIME,
    },
    # api/nodes.go: type NodeResources struct
    "NodeResources": {
        "Cpu": Struct("NodeCpuResources"),
        "Memory": Struct("NodeMemoryResources"),
        "Disk": Struct("NodeDiskResources"),
        "Networks": ListOf(Struct("NetworkResource", null=True)),
        "Devices": LIST,
        "MinDynamicPort": INT,
        "MaxDynamicPort": INT,
    },
    # api/nodes.go: type NodeCpuResources struct
    "NodeCpuResources": {"CpuShares": INT, "TotalCpuCores": INT, "ReservableCpuCores": ListOf(int)},
    # api/nodes.go: type NodeMemoryResources struct
    "NodeMemoryResources": {"MemoryMB": INT},
    # api/nodes.go: type NodeDiskResources struct
    "NodeDiskResources": {"DiskMB": INT},
    # api/nodes.go: type NodeReservedResources struct
    "NodeReservedResources": {
        "Cpu": Struct("NodeReservedCpuResources"),
        "Memory": Struct("NodeReservedMemoryResources"),
        "Disk": Struct("NodeReservedDiskResources"),
        "Networks": Struct("NodeReservedNetworkResources"),
    },
    # api/nodes.go: type NodeReservedCpuResources struct
    "NodeReservedCpuResources": {"CpuShares": INT},
    # api/nodes.go: type NodeReservedMemoryResources struct
    "NodeReservedMemoryResources": {"MemoryMB": INT},
    # api/nodes.go: type NodeReservedDiskResources struct
    "NodeReservedDiskResources": {"DiskMB": INT},
    # api/nodes.go: type NodeReservedNetworkResources struct
    "NodeReservedNetworkResources": {"ReservedHostPorts": STR},
    # api/agent.go: type AgentSelf struct (json tags: lower case)
    "AgentSelf": {"config": ANYMAP, "member": Struct("AgentMember"), "stats": MapOf(STRMAP)},
    # api/agent.go: type AgentMember struct
    "AgentMember": {
        "Name": STR,
        "Addr": STR,
        "Port": INT,
        "Tags": STRMAP,
        "Status": STR,
        "ProtocolMin": INT,
        "ProtocolMax": INT,
        "ProtocolCur": INT,
        "DelegateMin": INT,
        "DelegateMax": INT,
        "DelegateCur": INT,
    },
    # api/agent.go: type AgentHealthResponse struct
    "AgentHealthResponse": {
        "client": Omit(Struct("AgentHealth", null=True)),
        "server": Omit(Struct("AgentHealth", null=True)),
    },
    # api/agent.go: type AgentHealth struct
    "AgentHealth": {"ok": BOOL, "message": STR},
    # api/fs.go: type AllocFileInfo struct; ContentType is `omitempty` in what the client sends
    # (client/structs/structs.go: type AllocFileInfo struct)
    "AllocFileInfo": {
        "Name": STR,
        "IsDir": BOOL,
        "Size": INT,
        "FileMode": STR,
        "ModTime": TIME,
        "ContentType": Omit(STR),
    },
    # api/fs.go: type StreamFrame struct (and client/lib/streamframer/framer.go): every field omitempty
    "StreamFrame": {"Offset": Omit(INT), "Data": Omit(OSTR), "File": Omit(STR), "FileEvent": Omit(STR)},
    # api/jobs.go: type JobPlanResponse struct (`nomad job plan`) and the diff it carries
    "JobPlanResponse": {
        "JobModifyIndex": INT,
        "CreatedEvals": ListOf(Struct("Evaluation", null=True)),
        "Diff": Struct("JobDiff", null=True),
        "Annotations": Struct("PlanAnnotations", null=True),
        "FailedTGAllocs": MapOf(Struct("AllocationMetric", null=True)),
        "NextPeriodicLaunch": TIME,
        "Warnings": STR,
    },
    "JobDiff": {
        "Type": STR,
        "ID": STR,
        "Fields": ListOf(Struct("FieldDiff", null=True)),
        "Objects": ListOf(Struct("ObjectDiff", null=True)),
        "TaskGroups": ListOf(Struct("TaskGroupDiff", null=True)),
    },
    "TaskGroupDiff": {
        "Type": STR,
        "Name": STR,
        "Fields": ListOf(Struct("FieldDiff", null=True)),
        "Objects": ListOf(Struct("ObjectDiff", null=True)),
        "Tasks": ListOf(Struct("TaskDiff", null=True)),
        "Updates": MapOf(int),
    },
    "TaskDiff": {
        "Type": STR,
        "Name": STR,
        "Fields": ListOf(Struct("FieldDiff", null=True)),
        "Objects": ListOf(Struct("ObjectDiff", null=True)),
        "Annotations": STRS,
    },
    "FieldDiff": {"Type": STR, "Name": STR, "Old": STR, "New": STR, "Annotations": STRS},
    "ObjectDiff": {
        "Type": STR,
        "Name": STR,
        "Fields": ListOf(Struct("FieldDiff", null=True)),
        "Objects": ListOf(Struct("ObjectDiff", null=True)),
    },
    "PlanAnnotations": {
        "DesiredTGUpdates": MapOf(Struct("DesiredUpdates", null=True)),
        "PreemptedAllocs": ListOf(Struct("AllocationListStub", null=True)),
    },
    "DesiredUpdates": dict.fromkeys(DESIRED_UPDATES, INT),  # agent.decide.jobupdate's list, checked below
    # api/scaling.go: `nomad job scale` / `GET /v1/job/:id/scale`
    "JobScaleStatusResponse": {
        "JobID": STR,
        "Namespace": STR,
        "JobCreateIndex": INT,
        "JobModifyIndex": INT,
        "JobStopped": BOOL,
        "TaskGroups": MapOf(Struct("TaskGroupScaleStatus")),
    },
    "TaskGroupScaleStatus": {
        "Desired": INT,
        "Placed": INT,
        "Running": INT,
        "Healthy": INT,
        "Unhealthy": INT,
        "Events": ListOf(Struct("ScalingEvent")),
    },
    "ScalingEvent": {
        "Count": OINT,
        "PreviousCount": INT,
        "Error": BOOL,
        "Message": STR,
        "Meta": ANYMAP,
        "EvalID": OSTR,
        "Time": INT,
        "CreateIndex": INT,
    },
}

# The Go source of each struct: api/<file> unless the struct is listed in SOURCES_ELSEWHERE.
SOURCE_FILE: dict[str, str] = {
    **dict.fromkeys(
        (
            "Job",
            "JobListStub",
            "JobSummary",
            "TaskGroupSummary",
            "JobChildrenSummary",
            "JobPlanResponse",
            "JobDiff",
            "TaskGroupDiff",
            "TaskDiff",
            "FieldDiff",
            "ObjectDiff",
            "PlanAnnotations",
            "DesiredUpdates",
        ),
        "jobs.go",
    ),
    **dict.fromkeys(
        (
            "TaskGroup",
            "Task",
            "RestartPolicy",
            "Template",
            "ChangeScript",
            "WaitConfig",
            "Vault",
            "TaskEvent",
            "TaskState",
        ),
        "tasks.go",
    ),
    **dict.fromkeys(("NetworkResource", "Port", "Resources"), "resources.go"),
    **dict.fromkeys(("Service", "ServiceCheck"), "services.go"),
    **dict.fromkeys(
        (
            "Allocation",
            "AllocationListStub",
            "AllocatedResources",
            "AllocatedTaskResources",
            "AllocatedSharedResources",
            "AllocatedCpuResources",
            "AllocatedMemoryResources",
            "PortMapping",
            "AllocationMetric",
            "DesiredTransition",
            "AllocNetworkStatus",
        ),
        "allocations.go",
    ),
    "Evaluation": "evaluations.go",
    **dict.fromkeys(
        (
            "Node",
            "NodeListStub",
            "DriverInfo",
            "NodeResources",
            "NodeCpuResources",
            "NodeMemoryResources",
            "NodeDiskResources",
            "NodeReservedResources",
            "NodeReservedCpuResources",
            "NodeReservedMemoryResources",
            "NodeReservedDiskResources",
            "NodeReservedNetworkResources",
        ),
        "nodes.go",
    ),
    **dict.fromkeys(("AgentSelf", "AgentMember", "AgentHealthResponse", "AgentHealth"), "agent.go"),
    **dict.fromkeys(("AllocFileInfo", "StreamFrame"), "fs.go"),
    **dict.fromkeys(("JobScaleStatusResponse", "TaskGroupScaleStatus", "ScalingEvent"), "scaling.go"),
}
# Where the table follows the struct the Nomad agent encodes rather than the api package's copy of it.
OMITEMPTY_ELSEWHERE = {("AllocFileInfo", "ContentType")}  # client/structs/structs.go
# Fields of the server's struct (nomad/structs) that the HTTP API encodes and the api package's copy
# lacks: struct -> {field: spec}. check_shape takes them; the table test compares the api copy only.
SERVER_FIELDS: dict[str, dict[str, Spec]] = {"NodeResources": {"NodeNetworks": LIST}}

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$")


def check_shape(name: str, value: Any, path: str | None = None) -> None:
    """Fail (AssertionError naming the path) unless `value` is struct `name` as Go encodes it."""
    path = path or name
    fields = {**STRUCTS[name], **SERVER_FIELDS.get(name, {})}
    assert isinstance(value, Mapping), f"{path}: expected an object ({name}), got {type(value).__name__}"
    unknown = sorted(set(value) - set(fields))
    assert not unknown, f"{path}: unknown field(s) {unknown} (not in {name})"
    for field, spec in fields.items():
        if isinstance(spec, Omit) and field not in value:
            continue
        assert field in value, f"{path}.{field}: missing ({name})"
        check_value(spec, value[field], f"{path}.{field}")


def check_value(spec: Spec, value: Any, path: str) -> None:
    """Fail unless `value` matches `spec` (see the module's doc)."""
    if isinstance(spec, Omit):
        check_value(spec.spec, value, path)
        return
    if isinstance(spec, Struct | ListOf | MapOf) and value is None:
        assert spec.null, f"{path}: null where Nomad's field is not a pointer, slice or map"
        return
    if isinstance(spec, Struct):
        check_shape(spec.name, value, path)
    elif isinstance(spec, ListOf):
        assert isinstance(value, list), f"{path}: expected a list, got {type(value).__name__}"
        for i, item in enumerate(value):
            check_value(spec.item, item, f"{path}[{i}]")
    elif isinstance(spec, MapOf):
        assert isinstance(value, dict), f"{path}: expected an object (a map), got {type(value).__name__}"
        for key, item in value.items():
            assert isinstance(key, str), f"{path}: a map key {key!r} is not a string"
            check_value(spec.value, item, f"{path}[{key}]")
    elif isinstance(spec, _Time):
        assert isinstance(value, str), f"{path}: expected an RFC 3339 time string, got {type(value).__name__}"
        assert _RFC3339.match(value), f"{path}: {value!r} is not RFC 3339 as Go writes a time.Time"
    else:
        types = spec if isinstance(spec, tuple) else (spec,)
        ok = any(_is(t, value) for t in types)
        shown = " or ".join("null" if t is NULL else t.__name__ for t in types)
        assert ok, f"{path}: expected {shown}, got {type(value).__name__} {value!r:.60}"


def _is(t: type, value: Any) -> bool:
    if t is NULL:
        return value is None
    if t is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if t is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, t)


def kind(spec: Spec) -> tuple[str, bool, bool]:
    """(JSON kind, nullable, omitempty) of a spec: what a Go type says too (see `go_kind`)."""
    if isinstance(spec, Omit):
        base, null, _ = kind(spec.spec)
        return base, null, True
    if isinstance(spec, _Time):
        return "time", False, False
    if isinstance(spec, Struct | MapOf):
        return "dict", spec.null, False
    if isinstance(spec, ListOf):
        return "list", spec.null, False
    types = spec if isinstance(spec, tuple) else (spec,)
    bases = [t for t in types if t is not NULL]
    assert len(bases) == 1, spec
    return bases[0].__name__, NULL in types, False


_GO_SCALARS = {
    "string": "str",
    "bool": "bool",
    "float64": "float",
    "time.Duration": "int",
    "time.Time": "time",
    **dict.fromkeys(("int", "int64", "uint64", "uint16", "uint8", "int32", "uint32"), "int"),
}


def go_kind(go_type: str, omitempty: bool) -> tuple[str, bool, bool]:
    """(JSON kind, nullable, omitempty) of a Go field type as encoding/json writes it."""
    if go_type == "[]byte":
        return "str", True, omitempty  # base64, null when nil
    if go_type.startswith(("[]", "map[")):
        return ("list" if go_type.startswith("[]") else "dict"), True, omitempty
    if go_type.startswith("*"):
        base, _, _ = go_kind(go_type[1:], omitempty)
        return base, True, omitempty
    return _GO_SCALARS.get(go_type, "dict"), False, omitempty  # another struct: an object
