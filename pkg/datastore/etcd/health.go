package etcd

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types the controller sets on the Cluster from an Observed.
const (
	// ConditionHealthy is True when every member answers, all list the same
	// members and no alarm is raised.
	ConditionHealthy = "EtcdHealthy"
	// ConditionAlarm is True while an alarm is raised; the reason names it.
	ConditionAlarm = "EtcdAlarm"
)

// Health reasons (Plan's reasons are used for the rest).
const (
	ReasonHealthy           = "Healthy"
	ReasonMemberUnreachable = "MemberUnreachable"
	ReasonNoAlarm           = "NoAlarm"
	ReasonAlarmsUnknown     = "AlarmsUnknown"
)

// Conditions derives the etcd conditions from what was observed now, never from
// earlier conditions.
func Conditions(o Observed, generation int64) []metav1.Condition {
	healthy := metav1.Condition{Type: ConditionHealthy, Status: metav1.ConditionTrue, Reason: ReasonHealthy, ObservedGeneration: generation,
		Message: fmt.Sprintf("%d members answer and agree", len(o.Members))}
	switch {
	case !o.AnyReachable() || len(o.Members) == 0:
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, ReasonClusterUnreachable, "no etcd member answered"
	case o.QuorumLost():
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, ReasonQuorumLost, QuorumLostMessage(o)
	case disagreement(o) != "":
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, ReasonMembershipConverging, disagreement(o)
	case len(o.Alarms) > 0:
		healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, alarmReason(o), describeAlarms(o)
	default:
		for _, m := range o.Members {
			if !o.Healthy(m.ID) {
				healthy.Status, healthy.Reason = metav1.ConditionFalse, ReasonMemberUnreachable
				healthy.Message = strings.Join(MemberReport(o), "; ")
				break
			}
		}
		if healthy.Status == metav1.ConditionTrue && o.AlarmsUnknown != "" {
			healthy.Status, healthy.Reason, healthy.Message = metav1.ConditionFalse, ReasonAlarmsUnknown, o.AlarmsUnknown
		}
	}
	alarm := metav1.Condition{Type: ConditionAlarm, Status: metav1.ConditionFalse, Reason: ReasonNoAlarm, ObservedGeneration: generation}
	switch {
	case len(o.Alarms) > 0:
		alarm.Status, alarm.Reason, alarm.Message = metav1.ConditionTrue, alarmReason(o), describeAlarms(o)
	case o.QuorumLost():
		alarm.Status, alarm.Reason, alarm.Message = metav1.ConditionUnknown, ReasonQuorumLost, o.AlarmsUnknown
	case o.AlarmsUnknown != "":
		alarm.Status, alarm.Reason, alarm.Message = metav1.ConditionUnknown, ReasonAlarmsUnknown, o.AlarmsUnknown
	}
	return []metav1.Condition{healthy, alarm}
}

// alarmReason puts CORRUPT first: it is the one that needs a human.
func alarmReason(o Observed) string {
	if o.hasAlarm(AlarmCorrupt) {
		return ReasonAlarmCorrupt
	}
	return ReasonAlarmNoSpace
}

func describeAlarms(o Observed) string {
	parts := make([]string, 0, len(o.Alarms))
	for _, a := range o.Alarms {
		parts = append(parts, fmt.Sprintf("%s on member %s", a.Type, FormatID(a.MemberID)))
	}
	return strings.Join(parts, ", ") + "; see docs/etcd.md"
}
